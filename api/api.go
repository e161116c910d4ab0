// Package api is the wire contract of leaselog's HTTP API (docs/api.md,
// docs/openapi.yaml): the JSON documents the server sends and takes, its
// error codes, and a Go client ([Client]). The server, the Go worker and the
// CLI all speak through it. It imports nothing of the project: a worker or a
// client links the contract, never the daemon. The conversions from the
// daemon's own types to these documents are package ops's.
package api

import (
	"encoding/json"
	"time"
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
	// MaxRequeues caps an evaluation's requeues after losses; 0 (absent):
	// no cap.
	MaxRequeues int `json:"max_requeues,omitempty"`
	// The submission's scheduling: the labels a worker must offer to take
	// the job, its priority (higher first) and the time before which it is
	// granted to no one.
	Labels    map[string]string `json:"labels,omitempty"`
	Priority  int               `json:"priority,omitempty"`
	NotBefore *time.Time        `json:"not_before,omitempty"`
	// Of a queued job: WaitingFor is what it waits for, if it is not about
	// to be granted — WaitingForTime (its not_before, ahead) or
	// WaitingForWorker —, and Unroutable says that no worker present takes
	// its kind and offers its labels.
	WaitingFor string `json:"waiting_for,omitempty"`
	Unroutable bool   `json:"unroutable,omitempty"`
	// Timing is the job's own timing, whole (absent: the daemon's, in the
	// grant's renew_seconds…): its leases expire, and its worker fences
	// them, by it.
	Timing *Timing `json:"timing,omitempty"`
	// Details is the latest progress its live lease's heartbeats gave (a
	// JSON object; absent without a live lease, or before any).
	Details json.RawMessage `json:"details,omitempty"`
}

// What a queued job waits for (Job.WaitingFor).
const (
	WaitingForTime   = "not_before" // its not_before, still ahead
	WaitingForWorker = "worker"     // a worker that takes it: none present
)

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
	// Timing is the timing it was granted with, its job's own (absent: the
	// daemon's).
	Timing *Timing `json:"timing,omitempty"`
	// Details is the latest details its heartbeats gave, while it is live.
	Details json.RawMessage `json:"details,omitempty"`
}

// Timing is what a worker must know of the daemon's clock rules.
type Timing struct {
	RenewSeconds      float64 `json:"renew_seconds"`
	GraceSeconds      float64 `json:"grace_seconds"`
	TolerationSeconds float64 `json:"toleration_seconds"`
}

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
	// MaxRequeues caps how many times an evaluation is queued again after
	// its worker is lost; lost once more, it fails ("lost N times"). nil:
	// the daemon's default (plugins.executor.max_requeues); 0: no cap. A run
	// takes none: a loss fails it.
	MaxRequeues *int `json:"max_requeues,omitempty"`
	// Labels are those a worker must offer, each with an equal value, to
	// take the job: at most 16, keys and values at most 64 bytes.
	Labels map[string]string `json:"labels,omitempty"`
	// Priority orders the job among those a worker can take: higher first,
	// then the first queued; 0 is the default.
	Priority int `json:"priority,omitempty"`
	// NotBefore (RFC 3339), if set, is the time before which the job is
	// granted to no one: at most a year ahead of the daemon's clock.
	NotBefore string `json:"not_before,omitempty"`
	// The job's own timing, each field absent for the daemon's: the whole,
	// these over the daemon's timing at submission, must keep
	// 0 < 2×renew < grace < toleration, a renew of at least
	// [plugins.executor] min_renew_seconds and a toleration of at most
	// max_toleration_seconds. Its leases expire, and its worker fences
	// them, by it.
	RenewSeconds      *float64 `json:"renew_seconds,omitempty"`
	GraceSeconds      *float64 `json:"grace_seconds,omitempty"`
	TolerationSeconds *float64 `json:"toleration_seconds,omitempty"`
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
	// Start: the grants come back running, each lease's start recorded with
	// its grant (no POST /v1/leases/{lease}/start follows).
	Start bool `json:"start,omitempty"`
	Offer
}

// Offer is what a worker takes: the kinds of job ("run", "evaluation"; none:
// every kind) and the labels it offers. It is granted only jobs of a kind it
// takes whose every label it offers with an equal value.
type Offer struct {
	Kinds  []string          `json:"kinds,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Grants is the answer to acquire and to GET /v1/workers/{worker}/leases;
// Next, in the latter, is the cursor of the next page (absent on the last).
type Grants struct {
	Leases []Grant `json:"leases"`
	Next   string  `json:"next,omitempty"`
}

// Heartbeat is the body of POST /v1/workers/{worker}/heartbeat. Details,
// optional, gives the progress of some of the leases it names, by lease: a
// JSON object each, kept as the lease's latest (more than 4 KiB is kept as
// {"cut":N}, N its size). A map beside the list, so that {"leases":[…]}
// stays the whole heartbeat of a worker that has none to give.
type Heartbeat struct {
	Leases  []uint64                   `json:"leases"`
	Details map[uint64]json.RawMessage `json:"details,omitempty"`
}

// Directive tells a worker what to do with a lease it heartbeats.
type Directive string

// The directives of a heartbeat answer.
const (
	DirectiveContinue Directive = "continue" // keep running
	DirectiveCancel   Directive = "cancel"   // stop gracefully, then report
	DirectiveKill     Directive = "kill"     // stop now, then report
	DirectiveGone     Directive = "gone"     // the lease is not yours (any more): drop the job
)

// LeaseDirective is one lease's line of a heartbeat answer.
type LeaseDirective struct {
	Lease     uint64    `json:"lease"`
	Directive Directive `json:"directive"`
}

// HeartbeatReply is the answer to a heartbeat.
type HeartbeatReply struct {
	Leases []LeaseDirective `json:"leases"`
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
	// Next, if set, is the acquire the report carries: made for Worker once
	// the report is accepted, its grants in ReportReply.Next.
	Next *Next `json:"next,omitempty"`
}

// Next is the acquire a report carries: up to Max leases (0 is 1), started
// at once if Start, taken without waiting for a job.
type Next struct {
	Max   int  `json:"max"`
	Start bool `json:"start,omitempty"`
	Offer
}

// ReportReply is the answer to an accepted (or repeated) report.
type ReportReply struct {
	Accepted bool   `json:"accepted"`
	Job      string `json:"job"`
	Lease    uint64 `json:"lease"`
	Seq      uint64 `json:"seq"`
	// Next is the answer to the acquire the report carried, made by the call
	// that accepted the report: its grants, none when no job was queued. It
	// is absent when the report carried none, and when the answer repeats
	// that of an earlier call — whose grants, if its answer was lost, are the
	// worker's live leases (GET /v1/workers/{worker}/leases).
	Next *Grants `json:"next,omitempty"`
}

// SubmitBatch is the body of POST /v1/jobs/batch: up to 1000 jobs.
type SubmitBatch struct {
	Jobs []Submit `json:"jobs"`
}

// Submitted is one job's answer in a batch submit, in the place of its
// item: Status is what POST /v1/jobs would have answered it (201 created,
// 200 the same job existed, 4xx or 503 refused), with the job, or with the
// error that refused it, which recorded nothing.
type Submitted struct {
	ID     string `json:"id"`
	Status int    `json:"status"`
	Job    *Job   `json:"job,omitempty"`
	Error  *Error `json:"error,omitempty"`
}

// SubmitBatchReply is the answer to a batch submit.
type SubmitBatchReply struct {
	Jobs []Submitted `json:"jobs"`
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
	Heartbeats *Heartbeats     `json:"heartbeats,omitempty"`
	// Timing: a job's own timing (lease.queued), a lease's (lease.acquired).
	Timing *Timing `json:"timing,omitempty"`
	// Details: a heartbeat's details of its lease.
	Details json.RawMessage `json:"details,omitempty"`
}

// Heartbeats is what a lease.heartbeats event stands for: heartbeats of its
// lease that the daemon compacted, a while after the job ended, into the last
// of them, which the event is (its seq and time are that heartbeat's). The
// others' seqs are unused from then on.
type Heartbeats struct {
	Count     uint64    `json:"count"`      // the heartbeats, the last one included
	FirstSeq  uint64    `json:"first_seq"`  // the first one's seq
	FirstTime time.Time `json:"first_time"` // and its time
}

// Every list of the API pages: a list takes limit (default 100, at most
// 1000) and after, the Next of the page before, and its answer's Next is the
// cursor of the page after, absent (zero) on the last page. Cursors are
// opaque: pass them back as they came.

// Events is the answer to an events query; Next is the cursor to pass as
// after= for the next page: the last seq returned, 0 (absent) on the last
// page.
type Events struct {
	Events []Event `json:"events"`
	Next   uint64  `json:"next,omitempty"`
}

// History is the answer to GET /v1/jobs/{id}/history.
type History struct {
	Events []Event `json:"events"`
	Next   string  `json:"next,omitempty"`
}

// Leases is the answer to GET /v1/leases.
type Leases struct {
	Leases []Lease `json:"leases"`
	Next   string  `json:"next,omitempty"`
}

// Jobs is the answer to GET /v1/jobs.
type Jobs struct {
	Jobs []Job  `json:"jobs"`
	Next string `json:"next,omitempty"`
}

// Health is the answer to GET /healthz.
type Health struct {
	Status string `json:"status"`
	Seq    uint64 `json:"seq"`
	// BootID is the daemon host's boot id: a worker whose host has the same
	// fences on CLOCK_MONOTONIC, any other on CLOCK_BOOTTIME (hostclock.For).
	BootID string `json:"boot_id,omitempty"`
}

// Overview is the answer to GET /v1/overview: the daemon at a glance, as the
// dashboard's first page shows it.
type Overview struct {
	Time     time.Time         `json:"time"` // the daemon's now; the minutes end at it
	Seq      uint64            `json:"seq"`  // the last durable event counted
	Jobs     map[string]int    `json:"jobs"` // jobs, by state
	Reported map[string]uint64 `json:"reported"`
	Queue    Queue             `json:"queue"`
	Workers  WorkerCounts      `json:"workers"`
	// Minutes counts the events of the last hour, a minute at a time.
	Minutes Minutes `json:"minutes"`
	// Failures are the latest events of a job gone wrong, newest first:
	// lease.reported failed or killed, lease.expired (its worker lost) and
	// lease.failed (an evaluation lost once more than its max_requeues).
	Failures []Event `json:"failures"`
	// Stale are the latest stale reports, newest first.
	Stale []Event `json:"stale"`
	// Admin says whether the caller may submit, cancel and kill: its token
	// is an admin's, or the daemon takes none. A page shows its actions by it.
	Admin bool `json:"admin"`
}

// Queue is the queue's depth and the time its head was queued (absent when
// the queue is empty).
type Queue struct {
	Depth  int        `json:"depth"`
	Oldest *time.Time `json:"oldest,omitempty"`
	Job    string     `json:"job,omitempty"` // the head's id
}

// WorkerCounts counts the workers the daemon knows, by reachability.
type WorkerCounts struct {
	Reachable   int `json:"reachable"`
	Unreachable int `json:"unreachable"`
}

// Minutes are per-minute counts of the hour before Overview.Time, oldest
// first: Reported[i] the jobs reported (any outcome) in the minute from
// Start + i minutes, Expired the leases expired. A count the overview did
// not read (it reads a bounded number of events, newest minutes first) is
// null.
type Minutes struct {
	Start    time.Time `json:"start"`
	Reported []*int    `json:"reported"`
	Expired  []*int    `json:"expired"`
}
