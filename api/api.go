// Package api is the wire contract of leaselog's HTTP API (../shared/API.md,
// docs/openapi.yaml): the JSON documents the server sends and takes, the
// conversions from the lease table, and a Go client. The server, the Go
// worker and the CLI all speak through it, so they cannot drift apart.
package api

import (
	"encoding/json"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
)

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
	CodeInternal     = "internal"
)

// Job is a job as the API shows it.
type Job struct {
	ID        string          `json:"id"`
	Kind      string          `json:"kind"`
	State     string          `json:"state"`
	Attempts  int             `json:"attempts"`
	Leases    int             `json:"leases"`
	Outcome   string          `json:"outcome,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Ref       string          `json:"ref,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Spec      json.RawMessage `json:"spec"`
	Lease     *Lease          `json:"lease"` // the live lease, or null
	Submitted time.Time       `json:"submitted"`
	Updated   time.Time       `json:"updated"`
}

// Lease is a lease as the API shows it.
type Lease struct {
	Lease    uint64    `json:"lease"`
	Job      string    `json:"job"`
	Kind     string    `json:"kind"`
	Worker   string    `json:"worker"`
	State    string    `json:"state"`
	Revoke   string    `json:"revoke,omitempty"` // cancel or kill, once revoked
	Acquired time.Time `json:"acquired"`
	Heard    time.Time `json:"heard"`
	Report   uint64    `json:"report_seq,omitempty"` // the accepted report's seq
}

// Timing is what a worker must know of the daemon's clock rules.
type Timing struct {
	RenewSeconds      float64 `json:"renew_seconds"`
	GraceSeconds      float64 `json:"grace_seconds"`
	TolerationSeconds float64 `json:"toleration_seconds"`
}

// TimingOf converts a lease.Config.
func TimingOf(c lease.Config) Timing {
	return Timing{RenewSeconds: c.Renew.Seconds(), GraceSeconds: c.Grace.Seconds(), TolerationSeconds: c.Toleration.Seconds()}
}

// Config converts back to a lease.Config.
func (t Timing) Config() lease.Config {
	return lease.Config{Renew: seconds(t.RenewSeconds), Grace: seconds(t.GraceSeconds), Toleration: seconds(t.TolerationSeconds)}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Grant is a lease handed to a worker, with its job and the timing rules.
type Grant struct {
	Lease uint64 `json:"lease"`
	Job   Job    `json:"job"`
	// HeldSeconds is how long the daemon held the acquire before it granted
	// this lease (a long poll waits for a job): the worker's first fence
	// deadline counts from its send time plus this, never from the send time
	// alone. 0 in the answer to GET /v1/workers/{worker}/leases.
	HeldSeconds float64 `json:"held_seconds,omitempty"`
	Timing
}

// Submit is the body of POST /v1/jobs.
type Submit struct {
	ID   string          `json:"id"`
	Kind string          `json:"kind"`
	Spec json.RawMessage `json:"spec,omitempty"`
}

// Spec is the part of a job spec leaselog's own workers understand. Executors
// may put more in it; the daemon stores the spec as given (canonical JSON).
type Spec struct {
	Checkout  *Checkout `json:"checkout,omitempty"`
	Run       string    `json:"run"`
	BringBack []string  `json:"bring_back,omitempty"`
}

// Checkout names what to check out before running.
type Checkout struct {
	Repo string `json:"repo"`
	Ref  string `json:"ref,omitempty"`
}

// Acquire is the body of POST /v1/workers/{worker}/acquire.
type Acquire struct {
	Max         int     `json:"max"`
	WaitSeconds float64 `json:"wait_seconds"`
}

// Grants is the answer to acquire and to GET /v1/workers/{worker}/leases.
type Grants struct {
	Leases []Grant `json:"leases"`
}

// Heartbeat is the body of POST /v1/workers/{worker}/heartbeat.
type Heartbeat struct {
	Leases []uint64 `json:"leases"`
}

// Directive is one lease's line of a heartbeat answer.
type Directive = lease.LeaseDirective

// HeartbeatReply is the answer to a heartbeat.
type HeartbeatReply struct {
	Leases []Directive `json:"leases"`
	Timing
}

// Start is the body of POST /v1/leases/{lease}/start.
type Start struct {
	Worker string `json:"worker"`
}

// Report is the body of POST /v1/leases/{lease}/report.
type Report struct {
	Worker  string          `json:"worker"`
	Outcome string          `json:"outcome"`
	Ref     string          `json:"ref,omitempty"`
	Reason  string          `json:"reason,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
}

// ReportReply is the answer to an accepted (or repeated) report.
type ReportReply struct {
	Accepted bool   `json:"accepted"`
	Job      string `json:"job"`
	Lease    uint64 `json:"lease"`
	Seq      uint64 `json:"seq"`
}

// Event is a log event as the API shows it.
type Event struct {
	Seq        uint64          `json:"seq"`
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	Time       time.Time       `json:"time"`
	Job        string          `json:"job,omitempty"`
	Lease      uint64          `json:"lease,omitempty"`
	Worker     string          `json:"worker,omitempty"`
	Kind       string          `json:"kind,omitempty"`
	Outcome    string          `json:"outcome,omitempty"`
	Revoke     string          `json:"revoke,omitempty"`
	Ref        string          `json:"ref,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	GapSeconds float64         `json:"gap_seconds,omitempty"`
	Spec       json.RawMessage `json:"spec,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
}

// Events is the answer to an events query; Next is the cursor to pass as
// after= for the next page (the last seq returned, or after= itself).
type Events struct {
	Events []Event `json:"events"`
	Next   uint64  `json:"next"`
}

// Leases is the answer to GET /v1/leases.
type Leases struct {
	Leases []Lease `json:"leases"`
}

// Jobs is the answer to GET /v1/jobs.
type Jobs struct {
	Jobs []Job `json:"jobs"`
}

// Health is the answer to GET /healthz.
type Health struct {
	Status string `json:"status"`
	Seq    uint64 `json:"seq"`
	// BootID is the daemon host's boot id: a worker whose host has the same
	// fences on CLOCK_MONOTONIC, any other on CLOCK_BOOTTIME (hostclock.For).
	BootID string `json:"boot_id,omitempty"`
}

func unixTime(ns int64) time.Time { return time.Unix(0, ns).UTC() }

// JobOf converts a table job; live is its live lease, if any.
func JobOf(j projection.Job, live *projection.Lease) Job {
	out := Job{
		ID: j.ID, Kind: j.Kind.String(), State: j.State.String(), Attempts: j.Attempts, Leases: j.Leases,
		Outcome: j.Outcome.String(), Reason: j.Reason, Ref: j.Ref, Result: json.RawMessage(j.Result),
		Spec: json.RawMessage(j.Spec), Submitted: unixTime(j.Submitted), Updated: unixTime(j.Updated),
	}
	if len(out.Spec) == 0 {
		out.Spec = json.RawMessage("{}")
	}
	if live != nil {
		l := LeaseOf(*live)
		out.Lease = &l
	}
	return out
}

// LeaseOf converts a table lease.
func LeaseOf(l projection.Lease) Lease {
	return Lease{
		Lease: l.ID, Job: l.Job, Kind: l.Kind.String(), Worker: l.Worker, State: l.State.String(),
		Revoke: l.Mode.String(), Acquired: unixTime(l.Acquired), Heard: unixTime(l.Heard), Report: l.ReportSeq,
	}
}

// EventOf converts a log event. It copies what it keeps, so e may alias an
// iterator.
func EventOf(e *event.Event) Event {
	c := e.Clone()
	e = &c
	return Event{
		Seq: e.Seq, ID: e.ID.String(), Type: e.Type.String(), Time: unixTime(e.Time), Job: e.Job, Lease: e.Lease,
		Worker: e.Worker, Kind: e.Kind.String(), Outcome: e.Outcome.String(), Revoke: e.Mode.String(),
		Ref: e.Ref, Reason: e.Reason, GapSeconds: time.Duration(e.Gap).Seconds(),
		Spec: json.RawMessage(e.Spec), Result: json.RawMessage(e.Result),
	}
}
