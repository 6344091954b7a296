package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/codecell/codecell/internal/errdefs"
)

// apiError is the body of every 4xx/5xx answer of our own API.
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// statusOf maps an error class to an HTTP status and a stable code.
func statusOf(err error) (int, string) {
	switch {
	case errors.Is(err, errdefs.ErrInvalid):
		return http.StatusBadRequest, "invalid_request"
	case errors.Is(err, errdefs.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, "too_large"
	case errors.Is(err, errdefs.ErrNotFound):
		return http.StatusNotFound, "not_found"
	case errors.Is(err, errdefs.ErrConflict):
		return http.StatusConflict, "conflict"
	case errors.Is(err, errdefs.ErrExhausted):
		return http.StatusTooManyRequests, "busy"
	case errors.Is(err, errdefs.ErrUnavailable):
		return http.StatusServiceUnavailable, "unavailable"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return http.StatusGatewayTimeout, "deadline_exceeded"
	}
	return http.StatusInternalServerError, "internal"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// writeError answers err as JSON; busy answers carry Retry-After.
func writeError(w http.ResponseWriter, err error) {
	status, code := statusOf(err)
	msg := err.Error()
	// The class is in the code; its sentinel at the end of the message ("...:
	// invalid argument") tells the user nothing more.
	for _, class := range []error{errdefs.ErrInvalid, errdefs.ErrNotFound, errdefs.ErrConflict, errdefs.ErrUnavailable, errdefs.ErrExhausted, errdefs.ErrTooLarge} {
		msg = strings.TrimSuffix(msg, ": "+class.Error())
	}
	writeErrorCode(w, status, code, msg)
}

func writeErrorCode(w http.ResponseWriter, status int, code, msg string) {
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	var e apiError
	e.Error.Code, e.Error.Message = code, msg
	writeJSON(w, status, e)
}
