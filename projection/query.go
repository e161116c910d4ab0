package projection

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/timing"
)

// Job is a job as the table holds it. Spec and Result share the table's
// memory and must not be modified.
type Job struct {
	ID        string
	Kind      event.Kind
	State     fsm.State
	Spec      []byte
	Result    []byte
	Attempts  int // accepted reports; expiries are never attempts
	Leases    int // leases the job has had
	Outcome   event.Outcome
	Reason    string
	Ref       string
	Lease     uint64 // the live lease, or 0
	LastLease uint64 // the latest lease, live or ended, or 0
	Submitted int64
	Updated   int64
	// MaxRequeues caps an evaluation's requeues after losses (0: no cap).
	MaxRequeues int
	// The submission's scheduling: the labels a worker must offer to take
	// it, its priority (higher first), the time (Unix ns) before which it is
	// granted to no one (0: none), and, until it ends, its place in the
	// queue among jobs of its priority: the seq of its first lease.queued
	// (an ended job has none: its archive record keeps no place).
	Labels    event.Labels
	Priority  int
	NotBefore int64
	Place     uint64
	// Timing is the job's own timing (zero: the daemon's).
	Timing timing.Config
	// Details is the latest details its live lease's heartbeats gave (nil
	// without a live lease, or before any). Shares the table's memory.
	Details []byte
}

// Lease is a lease as the table holds it.
type Lease struct {
	ID        uint64 // the fencing token
	Job       string
	Kind      event.Kind
	Worker    string
	State     fsm.State // acquired, running, reported or expired (lost too)
	Mode      event.RevokeMode
	Acquired  int64
	Heard     int64  // when its holder last spoke of it (Unix ns)
	ReportSeq uint64 // the accepted report's seq (lease.reported, or lease.lost): the stored answer
	// Timing is the timing it was granted with (zero: the daemon's).
	Timing timing.Config
	// Details is the latest details its heartbeats gave while it is live.
	// Shares the table's memory.
	Details []byte
}

// Live reports whether the lease still holds its job.
func (l Lease) Live() bool { return l.State.Live() }

// Worker is a worker as the table knows it.
type Worker struct {
	ID          string
	Seen        int64 // when it last spoke (Unix ns)
	Unreachable bool
	Live        int // live leases held
}

func (j *job) view() Job {
	v := Job{
		ID: j.id, Kind: j.kind, State: j.state, Spec: j.spec,
		Leases: int(j.leases), Outcome: j.outcome, Reason: j.reason,
		Submitted: j.submitted, Updated: j.updated, MaxRequeues: int(j.maxRequeues),
		Labels: j.labels, Priority: int(j.priority), NotBefore: j.notBefore,
	}
	if !j.state.Terminal() {
		v.Place = j.place
	}
	if j.outcome != 0 {
		v.Attempts = 1 // a report, the job's only attempt, ended it
	}
	if j.timing != nil {
		v.Timing = *j.timing
	}
	if j.current != nil {
		v.LastLease = j.current.id
		if j.current.state.Live() {
			v.Lease = j.current.id
			v.Details = j.current.details
		}
	}
	return v
}

func (l *lease) view() Lease {
	v := Lease{
		ID: l.id, Job: l.job.id, Kind: l.job.kind, Worker: l.worker.id, State: l.state, Mode: l.mode,
		Acquired: l.acquired, Heard: l.heard, ReportSeq: l.reportSeq, Details: l.details,
	}
	if l.timing != nil {
		v.Timing = *l.timing
	}
	return v
}

func (w *worker) view() Worker {
	return Worker{ID: w.id, Seen: w.seen, Unreachable: w.unreachable, Live: w.live}
}

// Job returns the job with the given id: one the table holds, or, in
// RetireKeep mode, one it retired.
func (t *Table) Job(id string) (Job, bool) {
	j := t.jobs[id]
	if j == nil {
		v, ok := t.retired.jobs[id]
		return v, ok
	}
	return j.view(), true
}

// JobFilter selects jobs; zero fields select all. An outcome selects jobs
// reported with it, which have ended: none of those the table holds. Labels
// select the jobs that require each of them (and maybe more).
type JobFilter struct {
	State   fsm.State
	Kind    event.Kind
	Outcome event.Outcome
	Labels  event.Labels
	Prefix  string // ids that start with it (a search by id)
}

// Selects reports whether f selects j.
func (f JobFilter) Selects(j Job) bool {
	return (f.State == fsm.None || j.State == f.State) && (f.Kind == 0 || j.Kind == f.Kind) &&
		(f.Outcome == 0 || j.Outcome == f.Outcome) && strings.HasPrefix(j.ID, f.Prefix) &&
		f.Labels.Within(j.Labels)
}

// Requeues is how many times job id, which the table holds, was queued again
// after a loss: what its cap (Job.MaxRequeues) counts. A job that ended has
// no count: it is queued no more.
func (t *Table) Requeues(id string) int {
	if j := t.jobs[id]; j != nil {
		return int(j.requeues)
	}
	return 0
}

// Jobs returns the jobs f selects, by id: those the table holds and, in
// RetireKeep mode, those it retired.
func (t *Table) Jobs(f JobFilter) []Job {
	var out []Job
	for _, j := range t.jobs {
		if v := j.view(); f.Selects(v) {
			out = append(out, v)
		}
	}
	for _, j := range t.retired.jobs {
		if f.Selects(j) {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b Job) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// JobCount is how many jobs are in state s.
func (t *Table) JobCount(s fsm.State) int {
	if int(s) >= len(t.jobsIn) {
		return 0
	}
	return t.jobsIn[s]
}

// LiveCount is how many live leases are in state s (acquired or running).
func (t *Table) LiveCount(s fsm.State) int {
	n := 0
	t.live.each(func(l *lease) {
		if l.state == s {
			n++
		}
	})
	return n
}

// Lease returns the lease with the given token: one the table holds, or, in
// RetireKeep mode, one it retired.
func (t *Table) Lease(id uint64) (Lease, bool) {
	l := t.leases[id]
	if l == nil {
		v, ok := t.retired.leases[id]
		return v, ok
	}
	return l.view(), true
}

// LeaseFilter selects leases. With State unset only live leases are selected:
// the current table. Other zero fields select all.
type LeaseFilter struct {
	State  fsm.State
	Worker string
	Kind   event.Kind
}

// Selects reports whether f selects l.
func (f LeaseFilter) Selects(l Lease) bool {
	if f.State == fsm.None && !l.Live() {
		return false
	}
	return (f.State == fsm.None || l.State == f.State) && (f.Worker == "" || l.Worker == f.Worker) && (f.Kind == 0 || l.Kind == f.Kind)
}

// Leases returns the leases f selects, by token: of those the table holds
// and, in RetireKeep mode, those it retired.
func (t *Table) Leases(f LeaseFilter) []Lease {
	var out []Lease
	pick := func(l *lease) {
		if v := l.view(); f.Selects(v) {
			out = append(out, v)
		}
	}
	if f.State == fsm.None || f.State.Live() {
		t.live.each(pick)
	} else {
		for _, l := range t.leases {
			pick(l)
		}
		for _, l := range t.retired.leases {
			if f.Selects(l) {
				out = append(out, l)
			}
		}
	}
	slices.SortFunc(out, func(a, b Lease) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Worker returns the worker with the given id.
func (t *Table) Worker(id string) (Worker, bool) {
	w := t.workers[id]
	if w == nil {
		return Worker{}, false
	}
	return w.view(), true
}

// Workers returns every worker the table knows, by id.
func (t *Table) Workers() []Worker {
	out := make([]Worker, 0, len(t.workers))
	for _, w := range t.workers {
		out = append(out, w.view())
	}
	slices.SortFunc(out, func(a, b Worker) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Silent returns the live leases that have not been heard from for longer
// than their toleration (a lease's own, or else toleration, the daemon's),
// and the reachable workers holding live leases not heard from for longer
// than grace, at wall time now; all in present time, so recorded absence
// does not count. The leases are ordered by deadline (heard + toleration),
// earliest first, the workers by silence, longest first; then by id.
//
// A worker's unreachability stays the daemon's grace whatever its leases'
// timing: it is a verdict on the worker (it takes no new lease until it
// speaks), not on a job, as the daemon's absence is the daemon's.
func (t *Table) Silent(now, grace, toleration int64) ([]Lease, []Worker) {
	p := t.Present(now)
	var ls []*lease
	t.live.expired(p, time.Duration(toleration), func(l *lease) { ls = append(ls, l) })
	deadline := func(l *lease) int64 {
		if l.timing != nil {
			return l.order.at + int64(l.timing.Toleration)
		}
		return l.order.at + toleration
	}
	slices.SortFunc(ls, func(a, b *lease) int { return cmp.Or(cmp.Compare(deadline(a), deadline(b)), cmp.Compare(a.id, b.id)) })
	var ws []*worker
	t.watched.upTo(p-grace-1, func(w *worker) { ws = append(ws, w) })
	slices.SortFunc(ws, func(a, b *worker) int { return cmp.Or(cmp.Compare(a.order.at, b.order.at), cmp.Compare(a.id, b.id)) })
	leases := make([]Lease, len(ls))
	for i, l := range ls {
		leases[i] = l.view()
	}
	workers := make([]Worker, len(ws))
	for i, w := range ws {
		workers[i] = w.view()
	}
	return leases, workers
}
