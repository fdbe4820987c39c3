package auth

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/golang-jwt/jwt/v5"
)

// Key limits.
const (
	// MinSecretLen is the shortest HS256 secret accepted, in bytes: as
	// long as the SHA-256 output, as RFC 7518 §3.2 requires.
	MinSecretLen = 32
	// MinRSABits is the smallest RSA modulus accepted.
	MinRSABits = 2048
)

// Algorithms used, named as in the JWT "alg" header.
const (
	AlgHS256 = "HS256" // HMAC SHA-256, shared secret
	AlgRS256 = "RS256" // RSASSA-PKCS1-v1_5 SHA-256
	AlgEdDSA = "EdDSA" // Ed25519
)

// checkSecret validates an HS256 secret. The error names the length only,
// never the content.
func checkSecret(secret []byte) error {
	if len(secret) < MinSecretLen {
		return fmt.Errorf("auth: secret is %d bytes, at least %d are required", len(secret), MinSecretLen)
	}
	if bytes.HasPrefix(bytes.TrimSpace(secret), []byte("-----BEGIN")) {
		// A PEM key given as a secret is the setup of the HS/RS confusion
		// attack: the public key is no secret.
		return errors.New("auth: secret looks like a PEM key; pass a public key as PublicKeyPEM")
	}
	return nil
}

// parsePublicKey reads a PEM public key: PKIX "PUBLIC KEY" (RSA or Ed25519)
// or PKCS #1 "RSA PUBLIC KEY". It returns the key and the algorithm its
// type pins.
func parsePublicKey(data []byte) (key any, alg string, err error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, "", errors.New("auth: public key: no PEM block found")
	}
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, "", fmt.Errorf("auth: public key: %w", err)
		}
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
		if err != nil {
			return nil, "", fmt.Errorf("auth: public key: %w", err)
		}
	default:
		return nil, "", fmt.Errorf("auth: public key: PEM block is %q, want \"PUBLIC KEY\" or \"RSA PUBLIC KEY\"", block.Type)
	}
	switch k := key.(type) {
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < MinRSABits {
			return nil, "", fmt.Errorf("auth: public key: RSA key is %d bits, at least %d are required", n, MinRSABits)
		}
		return k, AlgRS256, nil
	case ed25519.PublicKey:
		return k, AlgEdDSA, nil
	default:
		return nil, "", fmt.Errorf("auth: public key: unsupported key type %T, want RSA or Ed25519", key)
	}
}

// parsePrivateKey reads a PEM private key: PKCS #1 "RSA PRIVATE KEY" or
// PKCS #8 "PRIVATE KEY" (RSA or Ed25519). It returns the key and the
// algorithm its type pins. Errors never quote the key.
func parsePrivateKey(data []byte) (key any, alg string, err error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, "", errors.New("auth: private key: no PEM block found")
	}
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, "", fmt.Errorf("auth: private key: PEM block is %q, want \"PRIVATE KEY\" or \"RSA PRIVATE KEY\"", block.Type)
	}
	if err != nil {
		return nil, "", fmt.Errorf("auth: private key: %w", err)
	}
	switch k := key.(type) {
	case *rsa.PrivateKey:
		if n := k.N.BitLen(); n < MinRSABits {
			return nil, "", fmt.Errorf("auth: private key: RSA key is %d bits, at least %d are required", n, MinRSABits)
		}
		return k, AlgRS256, nil
	case ed25519.PrivateKey:
		return k, AlgEdDSA, nil
	default:
		return nil, "", fmt.Errorf("auth: private key: unsupported key type %T, want RSA or Ed25519", key)
	}
}

// signingMethod returns the jwt method of a pinned algorithm.
func signingMethod(alg string) jwt.SigningMethod {
	switch alg {
	case AlgHS256:
		return jwt.SigningMethodHS256
	case AlgRS256:
		return jwt.SigningMethodRS256
	case AlgEdDSA:
		return jwt.SigningMethodEdDSA
	}
	return nil
}
