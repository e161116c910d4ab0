package event

import (
	"fmt"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/leaselog/leaselog/timing"
)

// Type is the type of an event. The numeric values are part of the on-disk
// format and never change; new types take new numbers.
type Type uint8

// The event types of docs/design.md §3. TypeLost (lease.lost) is a worker's word that
// it lost a live lease's job, and TypeFailed (lease.failed) the end of an
// evaluation lost once more than its max_requeues allows; they came after the
// others, hence their numbers. TypeHeartbeats (lease.heartbeats) is never
// appended: a compaction of the log writes it in place of a lease's last
// heartbeat, summarising the heartbeats it removed (Beats).
const (
	TypeQueued Type = iota + 1
	TypeAcquired
	TypeRunning
	TypeHeartbeat
	TypeRevoked
	TypeReported
	TypeExpired
	TypeCancelled
	TypeStaleReport
	TypeWorkerUnreachable
	TypeWorkerReachable
	TypeDaemonStarted
	TypeDaemonStopping
	TypeDaemonResumed
	TypeLost
	TypeFailed
	TypeHeartbeats

	typeEnd // one past the last known type
)

// NumTypes bounds the Type values this version knows: every known type is in
// [1, NumTypes). Tables indexed by Type use it as their length.
const NumTypes = int(typeEnd)

var typeNames = [...]string{
	TypeQueued:            "lease.queued",
	TypeAcquired:          "lease.acquired",
	TypeRunning:           "lease.running",
	TypeHeartbeat:         "lease.heartbeat",
	TypeRevoked:           "lease.revoked",
	TypeReported:          "lease.reported",
	TypeExpired:           "lease.expired",
	TypeCancelled:         "lease.cancelled",
	TypeStaleReport:       "lease.stale_report",
	TypeWorkerUnreachable: "worker.unreachable",
	TypeWorkerReachable:   "worker.reachable",
	TypeDaemonStarted:     "daemon.started",
	TypeDaemonStopping:    "daemon.stopping",
	TypeDaemonResumed:     "daemon.resumed",
	TypeLost:              "lease.lost",
	TypeFailed:            "lease.failed",
	TypeHeartbeats:        "lease.heartbeats",
}

// Types lists every known type in numeric order.
func Types() []Type {
	ts := make([]Type, 0, NumTypes-1)
	for t := Type(1); t < typeEnd; t++ {
		ts = append(ts, t)
	}
	return ts
}

// Known reports whether t is a type this version understands. A log written
// by a newer version may hold types an older one does not.
func (t Type) Known() bool { return t >= 1 && t < typeEnd }

func (t Type) String() string {
	if t.Known() {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// ParseType is the inverse of Type.String for known types.
func ParseType(s string) (Type, error) {
	for t := Type(1); t < typeEnd; t++ {
		if typeNames[t] == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("event: unknown event type %q (want one of %s)", s, strings.Join(typeNames[1:], ", "))
}

// Kind is the kind of a job.
type Kind uint8

// Job kinds. An agent session is a run; a scored job is an evaluation.
const (
	KindRun Kind = iota + 1
	KindEvaluation
)

func (k Kind) String() string {
	switch k {
	case KindRun:
		return "run"
	case KindEvaluation:
		return "evaluation"
	case 0:
		return ""
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind is the inverse of Kind.String.
func ParseKind(s string) (Kind, error) {
	switch s {
	case "run":
		return KindRun, nil
	case "evaluation":
		return KindEvaluation, nil
	}
	return 0, fmt.Errorf("event: unknown job kind %q (want run or evaluation)", s)
}

// Outcome is what a worker reports a job came to.
type Outcome uint8

// Report outcomes.
const (
	OutcomeSucceeded Outcome = iota + 1
	OutcomeFailed
	OutcomeCancelled
	OutcomeKilled
	// OutcomeLost is a worker's word that it lost the job (it fenced itself,
	// the run directory is gone, the job was killed under it). It is not an
	// outcome of the job: the daemon records lease.lost and folds it like an
	// expiry, never as an attempt.
	OutcomeLost
)

func (o Outcome) String() string {
	switch o {
	case OutcomeSucceeded:
		return "succeeded"
	case OutcomeFailed:
		return "failed"
	case OutcomeCancelled:
		return "cancelled"
	case OutcomeKilled:
		return "killed"
	case OutcomeLost:
		return "lost"
	case 0:
		return ""
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// ReportOutcomes are the outcomes a job can come to, in a lease.reported:
// every outcome but lost, a worker's word that it lost the job (lease.lost).
func ReportOutcomes() []Outcome {
	return []Outcome{OutcomeSucceeded, OutcomeFailed, OutcomeCancelled, OutcomeKilled}
}

// ParseOutcome is the inverse of Outcome.String.
func ParseOutcome(s string) (Outcome, error) {
	for o := OutcomeSucceeded; o <= OutcomeLost; o++ {
		if o.String() == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("event: unknown outcome %q (want succeeded, failed, cancelled, killed or lost)", s)
}

// RevokeMode says how a leased job is to be stopped.
type RevokeMode uint8

// Revoke modes, weakest first: a kill overrides a cancel, never the reverse.
const (
	RevokeCancel RevokeMode = iota + 1
	RevokeKill
)

func (m RevokeMode) String() string {
	switch m {
	case RevokeCancel:
		return "cancel"
	case RevokeKill:
		return "kill"
	case 0:
		return ""
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Event is one record of the log. Which fields are set depends on Type; the
// zero value of a field means "absent" and costs nothing on disk.
//
// An Event handed out by an Iter aliases the iterator's memory (strings and
// byte slices included) and is valid only until the iterator moves; Clone it
// to keep it.
type Event struct {
	Seq  uint64    // log position, gap-free from 1; assigned by Append
	ID   ulid.ULID // unique id, minted by the writer
	Type Type
	Time int64 // daemon wall clock, Unix nanoseconds

	Job     string
	Lease   uint64 // the fencing token the event concerns; for TypeAcquired, Seq itself
	Worker  string
	Kind    Kind
	Outcome Outcome
	Mode    RevokeMode
	Ref     string // the ref of a report's commits
	Reason  string
	Gap     int64  // absence in nanoseconds (daemon.started, daemon.resumed)
	Spec    []byte // job spec, JSON (lease.queued on submission)
	Result  []byte // report result, JSON
	// MaxRequeues is an evaluation's cap on being queued again after losses
	// (lease.queued on submission; 0: no cap), as the submission decided it:
	// the daemon's default recorded when the submission named none, so that
	// a later change of the default rewrites no history.
	MaxRequeues uint32
	Beats       Beats // lease.heartbeats: the heartbeats it stands for
	// Labels, Priority and NotBefore are a submission's scheduling
	// (lease.queued on submission): the labels a worker must offer to take
	// the job, its priority (higher first), and the time (Unix ns, the
	// daemon's clock) before which it is granted to no one (0: none).
	Labels    Labels
	Priority  int32
	NotBefore int64
	// Timing is a job's own timing (zero: the daemon's): on lease.queued at
	// submission, complete — the fields the submission named over the
	// daemon's timing then, so that a later change of the daemon's rewrites
	// no history —, and on lease.acquired, the timing the lease was granted
	// with, which its expiry and its worker's fence follow.
	Timing timing.Config
	// Details is what a heartbeat said of its lease's progress: a JSON
	// object of at most MaxDetailsLen bytes (lease.heartbeat; a
	// lease.heartbeats summary keeps the latest of those it stands for).
	Details []byte
}

// MaxDetailsLen bounds a heartbeat's details of one lease.
const MaxDetailsLen = 4096

// Beats summarises the heartbeats of one lease that a compaction of the log
// folded into a lease.heartbeats event, written at the seq of the last of
// them, whose time, id, job, lease and worker the event keeps. The others
// are gone from the log; their seqs stay unused, and Claim lets a verifier
// hold the gaps they left to the summaries that claim them.
type Beats struct {
	Count     uint64 // heartbeats summarised, the last one (this event) included
	FirstSeq  uint64 // the seq of the first of them
	FirstTime int64  // its time, Unix ns
	Claim     uint64 // ClaimOf the seqs removed: every one but the last
}

// ClaimOf is the contribution of the removed seq to a summary's Claim: Claims
// add up (mod 2^64) over the seqs a summary removed, so that a verifier can
// hold the sum over every gap of the log to the sum over every summary's
// Claim. The mix (splitmix64's finaliser) keeps two different sets of seqs
// from summing alike but by chance.
func ClaimOf(seq uint64) uint64 {
	z := seq + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Clone returns a copy of e that shares no memory with it.
func (e *Event) Clone() Event {
	c := *e
	c.Job = strings.Clone(e.Job)
	c.Worker = strings.Clone(e.Worker)
	c.Ref = strings.Clone(e.Ref)
	c.Reason = strings.Clone(e.Reason)
	c.Labels = Labels(strings.Clone(string(e.Labels)))
	if e.Spec != nil {
		c.Spec = append([]byte(nil), e.Spec...)
	}
	if e.Result != nil {
		c.Result = append([]byte(nil), e.Result...)
	}
	if e.Details != nil {
		c.Details = append([]byte(nil), e.Details...)
	}
	return c
}

// String renders e on one line, for logs, tests and the CLI.
func (e *Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seq=%d %s", e.Seq, e.Type)
	if e.Job != "" {
		fmt.Fprintf(&b, " job=%s", e.Job)
	}
	if e.Kind != 0 {
		fmt.Fprintf(&b, " kind=%s", e.Kind)
	}
	if e.Lease != 0 {
		fmt.Fprintf(&b, " lease=%d", e.Lease)
	}
	if e.Worker != "" {
		fmt.Fprintf(&b, " worker=%s", e.Worker)
	}
	if e.Mode != 0 {
		fmt.Fprintf(&b, " mode=%s", e.Mode)
	}
	if e.Outcome != 0 {
		fmt.Fprintf(&b, " outcome=%s", e.Outcome)
	}
	if e.Ref != "" {
		fmt.Fprintf(&b, " ref=%s", e.Ref)
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, " reason=%q", e.Reason)
	}
	if e.Gap != 0 {
		fmt.Fprintf(&b, " gap=%s", fmtDuration(e.Gap))
	}
	if len(e.Spec) != 0 {
		fmt.Fprintf(&b, " spec=%s", e.Spec)
	}
	if len(e.Result) != 0 {
		fmt.Fprintf(&b, " result=%s", e.Result)
	}
	if e.MaxRequeues != 0 {
		fmt.Fprintf(&b, " max_requeues=%d", e.MaxRequeues)
	}
	if e.Labels != "" {
		fmt.Fprintf(&b, " labels=%s", e.Labels)
	}
	if e.Priority != 0 {
		fmt.Fprintf(&b, " priority=%d", e.Priority)
	}
	if e.NotBefore != 0 {
		fmt.Fprintf(&b, " not_before=%s", time.Unix(0, e.NotBefore).UTC().Format(time.RFC3339Nano))
	}
	if e.Beats.Count != 0 {
		fmt.Fprintf(&b, " heartbeats=%d first=%d", e.Beats.Count, e.Beats.FirstSeq)
	}
	if e.Timing != (timing.Config{}) {
		fmt.Fprintf(&b, " timing=%s", TimingString(e.Timing))
	}
	if len(e.Details) != 0 {
		fmt.Fprintf(&b, " details=%s", e.Details)
	}
	return b.String()
}

func fmtDuration(ns int64) string { return time.Duration(ns).String() }

// TimingString renders a timing as renew/grace/toleration: "2s/5s/8s".
func TimingString(c timing.Config) string {
	return fmt.Sprintf("%s/%s/%s", c.Renew, c.Grace, c.Toleration)
}

// Reasons the daemon itself gives. Clients may give others.
const (
	ReasonWorkerLost    = "worker lost"          // a run's lease expired or was lost; an evaluation lost, queued again
	ReasonLeaseExpired  = "lease expired"        // an evaluation's lease expired: queued again
	ReasonRevokedLost   = "revoked; worker lost" // a revoked evaluation's lease expired or was lost: not queued again
	ReasonDaemonStopped = "daemon stopped"       // queued when the daemon stopped
	ReasonQueueKept     = "queued jobs kept"     // daemon.stopping of a stop that left the queue for the next start
	ReasonCancelled     = "cancelled"            // a client cancelled it while queued
	ReasonKilled        = "killed"               // a client killed it while queued
)

// LostTimes is the reason of lease.failed: an evaluation lost n times, once
// more than its max_requeues allowed it to be queued again.
func LostTimes(n int) string { return fmt.Sprintf("lost %d times", n) }
