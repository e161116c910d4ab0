// Package ops is the API's operations over a [lease.Service], each written
// once: the worker calls ([Acquire], [Heartbeat], [Start], [Report]) with
// their validation, the reads the API serves ([Job], [Jobs], [History],
// [Leases], [Events], [Workers], [WorkerLeases]), the conversions of the
// service's answers to the documents of package api ([JobOf], [GrantsOf]…)
// and of its errors to the API's ([ErrorOf]).
//
// The transports only carry them: the HTTP handlers and a session's frames
// (package server) decode, authorise, call and encode; [Daemon] hands them
// to a worker in the daemon's own process (the local worker, the
// simulation). So a call means the same whichever way it came, and api
// stays the wire contract alone, linking none of the daemon.
//
// An operation returns the service's errors as they are, for [ErrorOf] to
// map, and an *api.Error for input it refuses itself.
package ops

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/lease"
)

// errorStatus maps the service's sentinels to their HTTP status and code.
var errorStatus = []struct {
	err    error
	status int
	code   string
}{
	{lease.ErrInvalid, http.StatusBadRequest, api.CodeBadRequest},
	{lease.ErrNotFound, http.StatusNotFound, api.CodeNotFound},
	{lease.ErrWrongWorker, http.StatusForbidden, api.CodeForbidden},
	{lease.ErrStaleLease, http.StatusConflict, api.CodeStaleLease},
	{lease.ErrJobExists, http.StatusConflict, api.CodeJobExists},
	{lease.ErrStopping, http.StatusServiceUnavailable, api.CodeStopping},
	{lease.ErrBackupElsewhere, http.StatusConflict, api.CodeBackupElsewhere},
	// A failure of the log, however the service met it (lease.ErrFailed
	// wraps it), fails the service, which refuses every later call.
	{lease.ErrFailed, http.StatusServiceUnavailable, api.CodeUnavailable},
}

// ErrorOf maps an error of the lease service to the API error a client sees:
// its HTTP status and code. An *api.Error is returned as it is; errors that
// are not the service's sentinels are internal (500).
func ErrorOf(err error) *api.Error {
	var e *api.Error
	if errors.As(err, &e) {
		return e
	}
	for _, m := range errorStatus {
		if errors.Is(err, m.err) {
			return &api.Error{Status: m.status, Code: m.code, Message: err.Error()}
		}
	}
	return &api.Error{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: err.Error()}
}

// badRequest is a 400 with a message saying what is wrong.
func badRequest(format string, args ...any) *api.Error {
	return &api.Error{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: fmt.Sprintf(format, args...)}
}
