package api

import "errors"

// Error is the body of every error answer: {"error": {"code", "message"}},
// with stale_report_seq beside it when a report was stale.
type Error struct {
	Status         int    `json:"-"`
	Code           string `json:"code"`
	Message        string `json:"message"`
	StaleReportSeq uint64 `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// ErrorBody is the JSON document of an error answer.
type ErrorBody struct {
	Error          *Error `json:"error"`
	StaleReportSeq uint64 `json:"stale_report_seq,omitempty"`
}

// Error codes.
const (
	CodeBadRequest   = "bad_request"
	CodeUnauthorized = "unauthorized"
	CodeForbidden    = "forbidden"
	CodeNotFound     = "not_found"
	CodeMethod       = "method_not_allowed" // 405
	CodeJobExists    = "job_exists"
	CodeStaleLease   = "stale_lease"
	CodeStopping     = "stopping"
	CodeUnavailable  = "unavailable"
	CodeTooLarge     = "body_too_large"
	CodeBodyTimeout  = "body_timeout" // 408: the body did not arrive in time
	// CodeOutputRefused (409): a job's output file is not one the daemon
	// reads (the job made it a link, a named pipe…).
	CodeOutputRefused = "output_refused"
	// CodeBackupElsewhere (409): the daemon's store is not backed up
	// through the daemon (engine jetstream: the log is the NATS stream; the
	// message names the tool that backs it up).
	CodeBackupElsewhere = "backup_elsewhere"
	CodeInternal        = "internal"
)

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
