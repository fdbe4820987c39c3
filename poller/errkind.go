package poller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"syscall"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/routing"
)

// errKind classifies a failed probe's error into one of routing's cause
// kinds, from the error's chain rather than its text (which names the
// policy's URL): a non-2xx answer, an unusable answer, a DNS failure, a
// TLS failure, a refused connection, a timeout, else ErrKindOther.
func errKind(err error) string {
	var (
		se      *engine.StatusError
		de      *engine.DecodeError
		dnsErr  *net.DNSError
		ne      net.Error
		syntax  *json.SyntaxError
		typeErr *json.UnmarshalTypeError
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &se):
		return routing.ErrKindStatus(se.Status)
	case errors.As(err, &de), errors.As(err, &syntax), errors.As(err, &typeErr):
		return routing.ErrKindDecode
	case errors.As(err, &dnsErr):
		return routing.ErrKindDNS
	case isTLSError(err):
		return routing.ErrKindTLS
	case errors.Is(err, syscall.ECONNREFUSED):
		return routing.ErrKindConnectRefused
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return routing.ErrKindTimeout
	default:
		return routing.ErrKindOther
	}
}

// isTLSError reports whether err is a failed TLS handshake: a certificate
// not trusted or not for the host, an alert from the server, or a server
// that does not speak TLS.
func isTLSError(err error) bool {
	var (
		verify    *tls.CertificateVerificationError
		record    tls.RecordHeaderError
		alert     tls.AlertError
		unknownCA x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &record) || errors.As(err, &alert) ||
		errors.As(err, &unknownCA) || errors.As(err, &host) || errors.As(err, &invalid)
}
