package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/policyrouter/policyrouter/client"
)

// statusHint adds to an error of `status` reaching the router at url what
// to do about it: point status at the router (--url, POLICYROUTER_URL)
// when nothing answered there, trust its certificate (--ca) on an x509
// error, switch the scheme when one side speaks TLS and the other does
// not, give a token on a 401. Other errors are returned as they are.
func statusHint(err error, url string) error {
	if err == nil {
		return nil
	}
	var (
		unknownCA  x509.UnknownAuthorityError
		hostname   x509.HostnameError
		invalid    x509.CertificateInvalidError
		verify     *tls.CertificateVerificationError
		notTLS     tls.RecordHeaderError
		dns        *net.DNSError
		op         *net.OpError
		apiErr     *client.Error
		hint       string
		plainToTLS = strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
	)
	switch {
	case errors.As(err, &hostname):
		hint = "the router's certificate does not name the host of --url: use a --url whose host the certificate names (" +
			strings.Join(hostnameNames(hostname), ", ") + ")"
	case errors.As(err, &unknownCA), errors.As(err, &verify), errors.As(err, &invalid):
		hint = "the router's certificate is not trusted: pass the CA that signed it with --ca FILE (or POLICYROUTER_CA)"
	case errors.As(err, &notTLS), plainToTLS:
		hint = "the router serves plain HTTP: use an http:// --url"
	case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusBadRequest && strings.Contains(apiErr.Error(), "HTTPS"):
		hint = "the router serves HTTPS: use an https:// --url (and --ca if its certificate is not publicly trusted)"
	case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusUnauthorized:
		hint = "the router requires a bearer token: pass one with scope read with --token (or POLICYROUTER_TOKEN); policyrouter token mints one"
	case errors.As(err, &apiErr):
		return err
	case errors.As(err, &dns), errors.As(err, &op), errors.Is(err, context.DeadlineExceeded):
		hint = "no router answered at " + url + ": point status at one with --url URL or POLICYROUTER_URL=URL (default http://127.0.0.1:8080)"
	default:
		return err
	}
	return fmt.Errorf("%w\n  hint: %s", err, hint)
}

// hostnameNames lists the names a certificate is valid for.
func hostnameNames(e x509.HostnameError) []string {
	if e.Certificate == nil {
		return nil
	}
	names := append([]string(nil), e.Certificate.DNSNames...)
	for _, ip := range e.Certificate.IPAddresses {
		names = append(names, ip.String())
	}
	return names
}
