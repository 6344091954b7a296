// Package errdefs holds the error classes shared by every layer. Code below the
// server wraps one of these with context; only the server maps them to HTTP
// statuses, so a class means the same thing wherever it is raised.
package errdefs

import "errors"

var (
	// ErrInvalid: the request itself is wrong; the caller must change it.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound: the named thing does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the thing exists but is in a state that forbids the operation.
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: a dependency (runtime, binary, sandbox) cannot serve now.
	ErrUnavailable = errors.New("unavailable")
	// ErrExhausted: capacity is used up; retrying later may succeed.
	ErrExhausted = errors.New("resource exhausted")
	// ErrTooLarge: a size limit was exceeded.
	ErrTooLarge = errors.New("too large")
)
