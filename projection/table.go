// Package projection owns the lease table: the current state of every job,
// lease and worker, computed as a fold of the event log.
//
// Table.Apply is deterministic: it reads no clock, draws no random numbers and
// does no I/O, so the same log always folds to the same table, live or on
// replay. Like a raft state machine, the table has three verbs: Apply,
// Snapshot and Restore. Deadlines are kept in "present time": an event's time
// minus all the daemon absence recorded before it (daemon.started and
// daemon.resumed gaps), so an absence never counts against a worker.
//
// A job that ends leaves the table (see RetireMode), so that the table, its
// snapshots and a restart cost what is live, not the length of the history.
//
// A Table is not safe for concurrent use; lease.Service guards its own.
package projection

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/timing"
)

// Table is the lease table. The zero value is not usable; call New.
type Table struct {
	seq      uint64 // last event applied
	lastTime int64  // time of the last event applied
	absence  int64  // total daemon absence recorded, ns

	jobs    map[string]*job
	leases  map[uint64]*lease
	workers map[string]*worker
	// jobList and leaseList hold jobs and leases in the order the fold made
	// them (leases: by token), so that a snapshot lists them without sorting.
	jobList   roster[job, *job]
	leaseList roster[lease, *lease]
	byID      byID // jobs by state, each in id order (index.go)

	retireMode RetireMode
	retired    retired             // RetireKeep: ended jobs and their leases
	stale      map[StaleKey]uint64 // RetireKeep: stale report fingerprint -> its event's seq
	outbox     outbox              // RetireRecord: archive records not yet taken

	queue   queue                    // queued jobs, by class, best first (queue.go)
	live    liveSet                  // live leases, least recently heard first, by toleration
	watched recency[worker, *worker] // reachable workers holding live leases, least recently heard first
	nlive   int                      // live leases

	counts   [event.NumTypes]uint64 // events applied, by type
	jobsIn   [fsm.NumStates]int     // jobs, by state
	outcomes [numOutcomes]uint64    // lease.reported applied, by outcome

	mem arena
}

// A job is laid out for its size, a million of them queued: the fields of
// a byte and of four bytes share words. What only a report gives (its ref
// and result) is not held: a report ends the job, and its retirement takes
// them from the event (retire).
type job struct {
	id     string
	spec   []byte
	reason string
	// The submission's scheduling (lease.queued): the labels a worker must
	// offer, the priority, the time (Unix ns) before which it is not
	// granted; and its place, the seq of its first lease.queued, which a
	// queueing again after a loss keeps.
	labels  event.Labels
	kind    event.Kind
	state   fsm.State
	outcome event.Outcome // its report's; a job held has none
	waiting bool          // queued, not yet due: in queue.delayed
	// maxRequeues caps requeues, the times an evaluation was queued again
	// after a loss (0: no cap); lost once more, it fails (lease.failed).
	maxRequeues uint32
	requeues    uint32
	priority    int32
	qi          int32  // position in its heap, while queued (queue.go)
	leases      uint32 // leases granted
	current     *lease // the job's latest lease; live iff state is Acquired or Running
	submitted   int64
	updated     int64
	at          int // place in Table.jobList
	notBefore   int64
	place       uint64
	class       *class // while queued
	// timing is the job's own timing, as its submission recorded it; nil
	// (most jobs, which then cost one word for it): the daemon's.
	timing *timing.Config
}

type lease struct {
	id        uint64
	job       *job
	worker    *worker
	state     fsm.State // Acquired, Running, Reported or Expired
	mode      event.RevokeMode
	acquired  int64
	heard     int64 // time of the worker's latest word on this lease
	reportSeq uint64
	prev      *lease      // the job's lease before this one
	order     node[lease] // place in Table.live; order.at is heard in present time
	at        int         // place in Table.leaseList
	// timing is the timing the lease was granted with (lease.acquired);
	// nil: the daemon's, whatever it is when the sweeper judges.
	timing *timing.Config
	// details is the latest details a heartbeat gave of the live lease;
	// dropped when the lease ends (the log keeps them).
	details []byte
}

type worker struct {
	id          string
	seen        int64
	unreachable bool
	live        int          // live leases held
	order       node[worker] // place in Table.watched; order.at is seen in present time
}

// New returns an empty table, in RetireKeep mode.
func New() *Table {
	return &Table{
		jobs:    make(map[string]*job),
		leases:  make(map[uint64]*lease),
		workers: make(map[string]*worker),
		queue:   queue{delayed: jobHeap{delayed: true}},
	}
}

// StaleKey identifies a stale report by everything its sender said, so that
// the same stale report sent again is recognised and answered the same.
type StaleKey [16]byte

// StaleKeyOf returns the fingerprint of the stale report carried by e.
func StaleKeyOf(e *event.Event) StaleKey {
	h := sha256.New()
	var n [8]byte
	field := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	binary.BigEndian.PutUint64(n[:], e.Lease)
	h.Write(n[:])
	field([]byte(e.Worker))
	field([]byte{byte(e.Outcome)})
	field([]byte(e.Ref))
	field([]byte(e.Reason))
	field(e.Result)
	var k StaleKey
	copy(k[:], h.Sum(nil))
	return k
}

// Seq is the sequence number of the last event applied; 0 for an empty table.
func (t *Table) Seq() uint64 { return t.seq }

// Size is how many jobs and leases the table holds in memory: the records
// a snapshot lists (workers aside), what its length and its restore grow with.
func (t *Table) Size() int { return t.jobList.len() + t.leaseList.len() }

// LastTime is the time of the last event applied (Unix ns).
func (t *Table) LastTime() int64 { return t.lastTime }

// Present converts a wall-clock time to present time: what is left of it once
// the recorded absence is taken out. Deadlines compare in present time.
func (t *Table) Present(wall int64) int64 { return wall - t.absence }

// numOutcomes bounds the outcomes a report can have (lost is not one).
const numOutcomes = int(event.OutcomeKilled) + 1

// Reported is how many lease.reported with outcome o the table has applied:
// jobs that came to o. A worker's loss (lease.lost) is no report.
func (t *Table) Reported(o event.Outcome) uint64 {
	if int(o) >= len(t.outcomes) {
		return 0
	}
	return t.outcomes[o]
}

// Count is how many events of type typ the table has applied.
func (t *Table) Count(typ event.Type) uint64 {
	if int(typ) >= len(t.counts) {
		return 0
	}
	return t.counts[typ]
}

// Apply folds e into the table. It refuses, changing nothing, an event out of
// sequence or one that is not a legal transition from the current state; a log
// this module wrote never holds one. Apply does not keep e or any memory it
// points to.
func (t *Table) Apply(e *event.Event) error {
	if e.Seq != t.seq+1 {
		return fmt.Errorf("projection: seq %d applied after seq %d", e.Seq, t.seq)
	}
	if err := t.apply(e); err != nil {
		return fmt.Errorf("projection: seq %d %s: %w", e.Seq, e.Type, err)
	}
	t.seq = e.Seq
	t.lastTime = e.Time
	if e.Type == event.TypeHeartbeats {
		// Counted as the heartbeats it stands for, as the log before its
		// compaction was: the counts, and so the snapshots, are the same.
		t.counts[event.TypeHeartbeat] += e.Beats.Count
	} else {
		t.counts[e.Type]++
	}
	return nil
}

// Skip records that seqs first..last, the next ones, were compacted away
// (heartbeats a lease.heartbeats event further on stands for): there is
// nothing to fold, and the next event applied follows last. The log says
// which seqs it compacted, and checks each gap it meets against that
// (package eventlog); the table only keeps its own order.
func (t *Table) Skip(first, last uint64) error {
	if first != t.seq+1 || last < first {
		return fmt.Errorf("projection: seqs %d..%d skipped after seq %d", first, last, t.seq)
	}
	t.seq = last
	return nil
}

func (t *Table) apply(e *event.Event) error {
	switch e.Type {
	case event.TypeQueued:
		return t.applyQueued(e)
	case event.TypeAcquired:
		return t.applyAcquired(e)
	case event.TypeRunning, event.TypeHeartbeat, event.TypeRevoked, event.TypeReported, event.TypeExpired, event.TypeLost:
		return t.applyOnLease(e, e.Type)
	case event.TypeHeartbeats:
		if err := checkBeats(e); err != nil {
			return err
		}
		// The summary sits where the last of its heartbeats was, with its
		// time: folded as that heartbeat, it leaves the table as they did.
		return t.applyOnLease(e, event.TypeHeartbeat)
	case event.TypeCancelled:
		j := t.jobs[e.Job]
		if j == nil {
			return errUnknownJob
		}
		to, err := next(j, e.Type)
		if err != nil {
			return err
		}
		if j.state == fsm.Queued {
			t.queue.remove(j)
		}
		t.setState(j, to)
		j.updated, j.reason = e.Time, e.Reason
		t.retire(j, nil)
		return nil
	case event.TypeFailed:
		return t.applyFailed(e)
	case event.TypeStaleReport:
		return t.applyStale(e)
	case event.TypeWorkerUnreachable:
		w := t.workers[e.Worker]
		if w == nil || w.unreachable {
			return fmt.Errorf("worker %q is not reachable", e.Worker)
		}
		w.unreachable = true
		t.watched.remove(w)
		return nil
	case event.TypeWorkerReachable:
		w := t.workers[e.Worker]
		if w == nil || !w.unreachable {
			return fmt.Errorf("worker %q is not unreachable", e.Worker)
		}
		w.unreachable = false
		t.heardFrom(w, e.Time)
		return nil
	case event.TypeDaemonStarted, event.TypeDaemonResumed:
		if e.Gap < 0 {
			return fmt.Errorf("negative gap %d", e.Gap)
		}
		t.absence += e.Gap
		return nil
	case event.TypeDaemonStopping:
		return nil
	}
	return fmt.Errorf("event type %d is unknown to this build (written by a newer one?)", uint8(e.Type))
}

var errUnknownJob = fmt.Errorf("unknown job")

func next(j *job, typ event.Type) (fsm.State, error) {
	to, ok := fsm.Next(j.kind, j.state, typ)
	if !ok {
		return fsm.None, fmt.Errorf("job %q (%s) is %s: %s not allowed", j.id, j.kind, j.state, typ)
	}
	return to, nil
}

func (t *Table) applyQueued(e *event.Event) error {
	j := t.jobs[e.Job]
	if j == nil {
		if e.Job == "" {
			return fmt.Errorf("no job id")
		}
		if _, ok := fsm.Next(e.Kind, fsm.None, e.Type); !ok {
			return fmt.Errorf("job %q: bad kind %d", e.Job, e.Kind)
		}
		if e.MaxRequeues != 0 && e.Kind != event.KindEvaluation {
			return fmt.Errorf("job %q: max_requeues %d on a %s, which is never queued again", e.Job, e.MaxRequeues, e.Kind)
		}
		own, err := ownTiming(e)
		if err != nil {
			return err
		}
		j = t.mem.newJob()
		j.id, j.spec = t.mem.idAndBytes(e.Job, e.Spec)
		j.kind = e.Kind
		j.submitted = e.Time
		j.maxRequeues = e.MaxRequeues
		j.labels = t.queue.labels(e.Kind, e.Labels)
		j.priority, j.notBefore, j.place = e.Priority, e.NotBefore, e.Seq
		j.timing = own
		t.jobs[j.id] = j
		t.jobList.add(j)
	} else if _, err := next(j, e.Type); err != nil {
		return err
	} else if e.MaxRequeues != 0 {
		return fmt.Errorf("job %q queued again with max_requeues %d: the cap is its submission's", j.id, e.MaxRequeues)
	} else if e.Labels != "" || e.Priority != 0 || e.NotBefore != 0 {
		return fmt.Errorf("job %q queued again with labels, priority or not_before: they are its submission's", j.id)
	} else if e.Timing != (timing.Config{}) {
		return fmt.Errorf("job %q queued again with a timing: the timing is its submission's", j.id)
	} else if j.capped() {
		return fmt.Errorf("job %q queued again %d times already, its max_requeues: lost once more, it fails", j.id, j.requeues)
	} else {
		j.requeues++ // queued again from expired: after a loss
	}
	t.setState(j, fsm.Queued)
	j.updated = e.Time
	if e.Reason != "" {
		j.reason = t.mem.reason(e.Reason)
	}
	t.queue.push(j, e.Time)
	return nil
}

func (t *Table) applyAcquired(e *event.Event) error {
	j := t.jobs[e.Job]
	if j == nil {
		return errUnknownJob
	}
	to, err := next(j, e.Type)
	if err != nil {
		return err
	}
	if e.Worker == "" {
		return fmt.Errorf("no worker")
	}
	w := t.workers[e.Worker]
	if w != nil && w.unreachable {
		return fmt.Errorf("worker %q is unreachable and may not take a lease", e.Worker)
	}
	if e.Lease != e.Seq {
		return fmt.Errorf("lease %d is not the event's own seq", e.Lease)
	}
	if j.current != nil && j.current.id >= e.Lease {
		return fmt.Errorf("token %d does not grow past %d", e.Lease, j.current.id)
	}
	if e.Time < j.notBefore {
		return fmt.Errorf("job %q granted at %s, before its not_before %s", j.id, fmtTime(e.Time), fmtTime(j.notBefore))
	}
	own, err := ownTiming(e)
	if err != nil {
		return err
	}
	if own != nil && j.timing != nil && *own == *j.timing {
		own = j.timing // one copy for the job and its leases
	}
	if w == nil {
		w = t.newWorker(e.Worker)
	}
	t.queue.remove(j)
	l := t.mem.newLease()
	*l = lease{id: e.Seq, job: j, worker: w, state: to, acquired: e.Time, heard: e.Time, prev: j.current, timing: own}
	t.leases[l.id] = l
	t.leaseList.add(l)
	t.setState(j, to)
	j.updated, j.current, j.reason = e.Time, l, ""
	j.leases++
	w.live++
	t.nlive++
	t.live.touch(l, t.Present(e.Time))
	t.heardFrom(w, e.Time)
	return nil
}

// ownTiming is the timing of its own that e, a lease.queued or a
// lease.acquired, records: nil for none (the daemon's). One that does not
// hold together is refused: no service wrote it.
func ownTiming(e *event.Event) (*timing.Config, error) {
	if e.Timing == (timing.Config{}) {
		return nil, nil
	}
	if err := e.Timing.Validate(); err != nil {
		return nil, fmt.Errorf("timing %s: %w", event.TimingString(e.Timing), err)
	}
	c := e.Timing
	return &c, nil
}

// checkBeats refuses a summary of heartbeats that no compaction wrote: fewer
// than two, or a first one that is not after the lease's grant and before
// the summary itself.
func checkBeats(e *event.Event) error {
	b := e.Beats
	switch {
	case b.Count < 2:
		return fmt.Errorf("summarises %d heartbeats, not 2 or more", b.Count)
	case b.FirstSeq <= e.Lease || b.FirstSeq >= e.Seq:
		return fmt.Errorf("first heartbeat at seq %d, not between the lease's grant (seq %d) and the summary", b.FirstSeq, e.Lease)
	case b.Count > e.Seq-b.FirstSeq+1:
		return fmt.Errorf("summarises %d heartbeats in seqs %d..%d", b.Count, b.FirstSeq, e.Seq)
	}
	return nil
}

// applyOnLease folds the events a live lease's holder (or the sweeper) sends
// about it: running, heartbeat, revoked, reported, expired, lost; typ is
// e's type, or for a summary of heartbeats the heartbeat it folds as.
func (t *Table) applyOnLease(e *event.Event, typ event.Type) error {
	l := t.leases[e.Lease]
	if l == nil {
		return fmt.Errorf("unknown lease %d", e.Lease)
	}
	j := l.job
	if j.id != e.Job {
		return fmt.Errorf("lease %d is of job %q, not %q", l.id, j.id, e.Job)
	}
	if j.current != l || !l.state.Live() {
		return fmt.Errorf("lease %d is %s, not live", l.id, l.state)
	}
	from := typ == event.TypeRunning || typ == event.TypeHeartbeat || typ == event.TypeReported || typ == event.TypeLost
	if from && e.Worker != l.worker.id {
		return fmt.Errorf("lease %d belongs to worker %q, not %q", l.id, l.worker.id, e.Worker)
	}
	if len(e.Details) > event.MaxDetailsLen || (len(e.Details) != 0 && typ != event.TypeHeartbeat) {
		return fmt.Errorf("details of %d bytes on a %s (at most %d, on a heartbeat)", len(e.Details), e.Type, event.MaxDetailsLen)
	}
	to, err := next(j, typ)
	if err != nil {
		return err
	}
	switch typ {
	case event.TypeRevoked:
		if e.Mode <= l.mode || e.Mode > event.RevokeKill {
			return fmt.Errorf("revoke mode %s does not strengthen %s", e.Mode, l.mode)
		}
		l.mode = e.Mode
	case event.TypeReported:
		if e.Outcome < event.OutcomeSucceeded || e.Outcome > event.OutcomeKilled { // lost is lease.lost, never a report
			return fmt.Errorf("bad outcome %d", e.Outcome)
		}
		l.state, l.reportSeq = fsm.Reported, e.Seq
		j.outcome = e.Outcome
		t.outcomes[e.Outcome]++
		// The job ends here and is retired below, which copies what it keeps
		// (and takes the report's ref and result from e): no copy of the
		// event's memory is needed before.
		j.reason = e.Reason
		t.endLease(l)
	case event.TypeExpired:
		l.state = fsm.Expired
		j.reason = t.mem.reason(e.Reason)
		t.endLease(l)
	case event.TypeLost:
		// Folded as an expiry, never an attempt; the worker's own reason and
		// ref stay in the event. The lease keeps the event as its answer, so
		// that the same report again is answered the same.
		l.state, l.reportSeq = fsm.Expired, e.Seq
		j.reason = event.ReasonWorkerLost
		t.endLease(l)
	default:
		l.state = to
		if len(e.Details) != 0 {
			l.details = append(l.details[:0], e.Details...)
		}
	}
	if from {
		l.heard = e.Time
		if l.state.Live() {
			t.live.touch(l, t.Present(e.Time))
		}
		t.heardFrom(l.worker, e.Time)
	}
	t.setState(j, to)
	j.updated = e.Time
	if to.Terminal() {
		t.retire(j, e)
	}
	return nil
}

// applyFailed ends an evaluation lost once more than its cap allows: it
// was queued again max_requeues times after losses, and lost again.
func (t *Table) applyFailed(e *event.Event) error {
	j := t.jobs[e.Job]
	if j == nil {
		return errUnknownJob
	}
	to, err := next(j, e.Type)
	if err != nil {
		return err
	}
	if !j.capped() {
		return fmt.Errorf("job %q queued again %d times, max_requeues %d: not at its cap", j.id, j.requeues, j.maxRequeues)
	}
	t.setState(j, to)
	j.updated, j.reason = e.Time, e.Reason
	t.retire(j, nil)
	return nil
}

// capped reports whether j, an evaluation, may not be queued again after
// another loss: it has a cap and has been queued again as often.
func (j *job) capped() bool { return j.maxRequeues != 0 && j.requeues >= j.maxRequeues }

// applyStale records a stale report: a report on a lease that expired, or a
// late claim on one already reported (or lost) that differs from its first
// report. That it differs is the service's to decide, against the first
// report's event in the log; the fold, which reads nothing, holds the rest.
// A lease the table has retired into a store it cannot read (RetireRecord,
// RetireDrop) cannot be checked here; the service checked it against the
// archive before it appended the report, and Verify, which folds in
// RetireKeep, checks it again.
func (t *Table) applyStale(e *event.Event) error {
	var v Lease
	if l := t.leases[e.Lease]; l != nil {
		v = l.view()
	} else if r, ok := t.retired.leases[e.Lease]; ok {
		v = r
	} else if t.retireMode == RetireKeep || e.Lease == 0 || e.Lease >= e.Seq {
		return fmt.Errorf("unknown lease %d", e.Lease)
	} else {
		v = Lease{ID: e.Lease, State: fsm.Expired, Worker: e.Worker}
	}
	switch {
	case v.State.Live():
		return fmt.Errorf("lease %d is %s, not stale", v.ID, v.State)
	case v.Worker != e.Worker:
		return fmt.Errorf("lease %d belongs to worker %q, not %q", v.ID, v.Worker, e.Worker)
	}
	k := StaleKeyOf(e)
	if _, dup := t.stale[k]; dup {
		return fmt.Errorf("stale report on lease %d recorded twice", v.ID)
	}
	t.retireStale(k, e.Seq)
	return nil
}

// setState moves j to state to, keeping the counts by state.
func (t *Table) setState(j *job, to fsm.State) {
	if j.state == to {
		return
	}
	if j.state != fsm.None {
		t.jobsIn[j.state]--
		t.byID.remove(j)
	}
	j.state = to
	t.jobsIn[to]++
	t.byID.add(j)
}

func (t *Table) endLease(l *lease) {
	t.live.remove(l)
	l.details = nil
	t.nlive--
	l.worker.live--
	if l.worker.live == 0 {
		t.watched.remove(l.worker)
	}
}

func (t *Table) newWorker(id string) *worker {
	w := t.mem.newWorker()
	*w = worker{id: t.mem.str(id)}
	t.workers[w.id] = w
	return w
}

// heardFrom records that worker w spoke at time now, and keeps it watched for
// silence while it is reachable and holds a live lease.
func (t *Table) heardFrom(w *worker, now int64) {
	w.seen = now
	if w.unreachable || w.live == 0 {
		t.watched.remove(w)
	} else {
		t.watched.touch(w, t.Present(now))
	}
}
