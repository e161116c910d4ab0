package api

import (
	"errors"
	"net/http"

	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/lease"
)

// ErrorOf maps an error of the lease service to the API error a client sees:
// its HTTP status and code. Errors that are not the service's sentinels are
// internal (500).
func ErrorOf(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	status, code := http.StatusInternalServerError, CodeInternal
	switch {
	case errors.Is(err, lease.ErrInvalid):
		status, code = http.StatusBadRequest, CodeBadRequest
	case errors.Is(err, lease.ErrNotFound):
		status, code = http.StatusNotFound, CodeNotFound
	case errors.Is(err, lease.ErrWrongWorker):
		status, code = http.StatusForbidden, CodeForbidden
	case errors.Is(err, lease.ErrStaleLease):
		status, code = http.StatusConflict, CodeStaleLease
	case errors.Is(err, lease.ErrJobExists):
		status, code = http.StatusConflict, CodeJobExists
	case errors.Is(err, lease.ErrStopping):
		status, code = http.StatusServiceUnavailable, CodeStopping
	case errors.Is(err, lease.ErrFailed), errors.Is(err, eventlog.ErrFailed), errors.Is(err, eventlog.ErrClosed):
		// The command that finds the log failed gets the log's own error; the
		// service fails with it and refuses every later one.
		status, code = http.StatusServiceUnavailable, CodeUnavailable
	}
	return &Error{Status: status, Code: code, Message: err.Error()}
}

// Retryable reports whether a call that failed with err may succeed if sent
// again: the daemon could not be reached, or answered that it is stopping or
// unavailable, or failed inside. A definite refusal (4xx) is not retryable.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var e *Error
	if !errors.As(err, &e) {
		return true // transport: refused, reset, timed out
	}
	return e.Status >= 500
}
