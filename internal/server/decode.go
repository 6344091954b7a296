package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/codecell/codecell/internal/errdefs"
)

// readBody reads a request body, failing with ErrTooLarge past limit.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, fmt.Errorf("request body is larger than the server's limit of %d bytes: %w", limit, errdefs.ErrTooLarge)
	}
	if err != nil {
		return nil, fmt.Errorf("read request body: %v: %w", err, errdefs.ErrInvalid)
	}
	return b, nil
}

// decodeStrict decodes one JSON object into v, rejecting unknown fields and
// trailing data, with messages that name the offending field.
func decodeStrict(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return fmt.Errorf("request body is empty; send a JSON object: %w", errdefs.ErrInvalid)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", describeJSONError(err), errdefs.ErrInvalid)
	}
	if dec.More() {
		return fmt.Errorf("request body has data after the JSON object: %w", errdefs.ErrInvalid)
	}
	return nil
}

func describeJSONError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %q must be %s, not %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: the body ends in the middle of a value"
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return strings.TrimPrefix(err.Error(), "json: ") + " (check the spelling against /openapi.yaml)"
	}
	return "malformed JSON: " + err.Error()
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "float64", "int", "int64":
		return "a number"
	case "bool":
		return "true or false"
	case "map", "struct":
		return "an object"
	case "slice":
		return "an array"
	}
	return goKind
}
