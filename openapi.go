// Package policyrouter is the root of the policyrouter module. It carries
// the API contract, openapi.yaml, so that the binary can serve it.
package policyrouter

import _ "embed"

// OpenAPI is openapi.yaml: the written form of the HTTP API.
//
//go:embed openapi.yaml
var OpenAPI []byte
