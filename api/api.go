// Package api holds the HTTP API's OpenAPI document, the source of truth the
// server serves at /openapi.yaml and its tests check routes against.
package api

import _ "embed"

// OpenAPI is api/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
