package sim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/replay"
)

// checker holds the invariants of docs/design.md §7 after every step:
//
//  1. no job runs on two workers at once: the execution intervals of a job's
//     runs (start to the moment a stop takes effect) never overlap; sharper,
//     the job stops before the daemon expires its lease: when a lease expires
//     (or its worker reports it lost), its job has stopped. With no
//     exception: whether the worker is alive, dead or paused, the job's
//     supervisor holds the fence; a job on a suspended host, which stands
//     still, is judged when the host wakes (killed then, its execution ended
//     at the suspend; or it runs on, and any expiry or second run meanwhile is
//     a violation);
//  2. nothing acknowledged is lost across a crash (the table rebuilt from the
//     crash image equals the one before it); the log has no gaps and replays;
//  3. fold(log) == live table: an incremental fold of every event appended
//     equals the live table's Snapshot after every step, and so does Rebuild
//     (snapshot + tail) every rebuildEvery steps and after every crash;
//  4. tokens of a job strictly grow; a stale call changes nothing and a stale
//     report is always recorded (and the same one answered the same);
//  5. a report on the current lease gets its first answer forever, and so
//     does every retry of it (its outcome, a ref and a result each left out
//     or its own); a report on a lease reported that says otherwise is a
//     late claim, stale (and so kept, as 4 says); attempts
//     equal accepted reports that are not losses, at most one; a loss is
//     folded as an expiry (a run fails, "worker lost"; an evaluation goes back
//     to the queue, or is cancelled if it was revoked); a job its supervisor
//     killed, or whose run directory went, is never reported as an attempt;
//  6. the daemon's absence expires nothing: every lease.expired (and every
//     worker.unreachable) comes after more than the lease's toleration, its
//     own or the daemon's (the daemon's grace) of silence
//     not counting the daemon's absences, on the global clock (the daemon's
//     wall clock steps; its stamps are not trusted); a sleep past grace is
//     recorded as daemon.resumed by the first sweep, before anything else;
//
// plus liveness: a live lease whose worker has been silent for its
// toleration of the daemon's up-time, plus a sweep period for each crash or sleep
// since, has expired (uptime.go: a crash loop keeps no lease for ever); and
// once the faults stop, every job ends within livenessBound.
type checker struct {
	s    *Sim
	fold *projection.Table // every event appended, folded as it is seen

	tokens   map[string]uint64        // job -> its latest token
	leases   map[uint64]string        // lease -> job
	heard    map[uint64]time.Duration // lease -> its holder's latest word
	seen     map[string]time.Duration // worker -> its latest word
	absent_  []span                   // the daemon's absences that must not count
	answers  map[uint64]uint64        // lease -> its first accepted answer
	reported map[string]int           // job -> its lease.reported events
	stale    map[string]uint64        // stale report content -> its record
	open     map[string][]*interval   // job -> its runs executing now
	running  map[uint64]*interval     // lease -> its run, while it executes
	runs     map[uint64]*simRun       // lease -> its run, once started
	// tolerations are the leases' own (owntiming.go): lease -> its
	// toleration, for a lease whose job asked for one.
	tolerations map[uint64]time.Duration

	submitted map[string]bool
	deadline  time.Duration
	checks    int           // table checks so far
	resume    time.Duration // a sleep past grace whose daemon.resumed is still to come
	uptime    uptime        // the daemon's up-time (uptime.go)
}

// rebuildEvery is how often (in table checks) the checker also rebuilds the
// table from the store.
const rebuildEvery = 8

type span struct{ from, to time.Duration }

// interval is one execution of a job on a worker's machine.
type interval struct {
	job      string
	w        *simWorker
	lease    uint64
	from, to time.Duration
	// On a suspended host the job stands still: what happened meanwhile is
	// a violation only if it runs on when the host wakes.
	frozen  bool
	pending string
}

func newChecker(s *Sim) *checker {
	return &checker{s: s, fold: projection.New(),
		tokens: map[string]uint64{}, leases: map[uint64]string{}, heard: map[uint64]time.Duration{},
		seen: map[string]time.Duration{}, answers: map[uint64]uint64{}, reported: map[string]int{}, stale: map[string]uint64{},
		open: map[string][]*interval{}, running: map[uint64]*interval{}, runs: map[uint64]*simRun{}, submitted: map[string]bool{},
		tolerations: map[uint64]time.Duration{}}
}

// eventsSince reads the events appended after seq before.
func (k *checker) eventsSince(before uint64) []event.Event {
	d := k.s.daemon
	if d == nil || !d.up {
		return nil
	}
	var out []event.Event
	it := d.log.Iter(before + 1)
	for it.Next() {
		out = append(out, it.Event().Clone())
	}
	if err := it.Close(); err != nil {
		k.s.fail("read the log after seq %d: %v", before, err)
	}
	return out
}

// opened is the daemon (re)opened: its table must be the fold of its log.
func (k *checker) opened(before uint64) {
	k.resume = 0 // a restart records its downtime as daemon.started
	if before > 0 {
		// After a restart the incremental fold starts again from the log:
		// the crash image must hold every event the fold had seen.
		rep, err := replay.Verify(k.s.daemon.log)
		if err != nil {
			k.s.fail("verify the log after a restart: %v", err)
			return
		}
		if rep.Table.Seq() < k.fold.Seq() {
			k.s.fail("the log lost acknowledged events in a crash: it ends at seq %d, seq %d was appended", rep.Table.Seq(), k.fold.Seq())
			return
		}
	}
	k.afterDaemon("open", before)
}

// afterDaemon is the check after every step of the daemon; it returns the
// events the step appended.
func (k *checker) afterDaemon(what string, before uint64) []event.Event {
	evs := k.eventsSince(before)
	if len(evs) == 0 {
		return nil
	}
	if k.resume > 0 {
		k.resumed(what, evs)
	}
	k.uptime.appended(k.s.now)
	for i := range evs {
		e := &evs[i]
		k.s.stats.Appended++
		k.s.tracef("  + %s", e)
		if err := k.fold.Apply(e); err != nil {
			k.s.fail("%s appended an event the fold refuses: %v", what, err)
			return evs
		}
		k.observe(e)
	}
	for _, e := range evs {
		if e.Type == event.TypeLost {
			k.lost(&e)
		}
	}
	k.routed(evs)
	k.table(what)
	return evs
}

// observe keeps what later checks need of an event, and checks tokens and
// the daemon's absence. Events are observed in the step that appended them:
// their time is now on the global clock, whatever the daemon's wall clock
// stamped on them (it may have stepped).
func (k *checker) observe(e *event.Event) {
	t := k.s.now
	k.s.hist.observe(e, t)
	switch e.Type {
	case event.TypeAcquired:
		if prev := k.tokens[e.Job]; e.Lease <= prev {
			k.s.fail("job %s: token %d granted after %d", e.Job, e.Lease, prev)
		}
		k.tokens[e.Job] = e.Lease
		k.leases[e.Lease] = e.Job
		if e.Timing.Toleration != 0 {
			k.tolerations[e.Lease] = e.Timing.Toleration
			k.s.stats.OwnLeases++
		}
		k.heard[e.Lease], k.seen[e.Worker] = t, t
		k.s.stats.Leases++
	case event.TypeRunning, event.TypeHeartbeat:
		k.heard[e.Lease], k.seen[e.Worker] = t, t
	case event.TypeReported:
		k.seen[e.Worker] = t
		k.reported[e.Job]++
		// A job its supervisor killed, or whose run directory went, is lost:
		// never an attempt.
		if r := k.runs[e.Lease]; r != nil && r.ended && r.outcome.Outcome == event.OutcomeLost.String() {
			k.s.fail("lease %d (job %s): A LOSS COUNTED AS AN ATTEMPT: its job ended %q (%s), reported %s", e.Lease, e.Job, r.outcome.Outcome, r.outcome.Reason, e.Outcome)
		}
	case event.TypeLost:
		k.seen[e.Worker] = t
		k.s.stats.Lost++
		// A worker says a job is lost once it has stopped (or never ran).
		k.stopped(e, "REPORTED LOST WHILE ITS JOB STILL RUNS", "a loss is reported only once the job stopped")
	case event.TypeWorkerReachable:
		k.seen[e.Worker] = t
	case event.TypeQueued:
		if e.Kind != 0 {
			k.s.stats.Jobs++
		}
	case event.TypeStaleReport:
		k.s.stats.Stale++
	case event.TypeFailed:
		k.s.stats.Poisoned++
	case event.TypeExpired:
		k.s.stats.Expired++
		if _, own := k.tolerations[e.Lease]; own {
			k.s.stats.OwnExpired++
		}
		if silent, tol := k.present(k.heard[e.Lease], t), k.tolerationOf(e.Lease); silent <= tol {
			k.s.fail("lease %d (job %s) expired after %v of silence once the daemon's absences are taken out: not more than toleration (%v)", e.Lease, e.Job, silent, tol)
		}
		// The job stops before the daemon expires (§7.1): by now the
		// lease's job must have stopped.
		k.stopped(e, "EXPIRED WHILE ITS JOB STILL RUNS", "the fence did not hold")
	case event.TypeWorkerUnreachable:
		if silent := k.present(k.seen[e.Worker], t); silent <= grace {
			k.s.fail("worker %s marked unreachable after %v of silence once the daemon's absences are taken out: not more than grace", e.Worker, silent)
		}
	}
}

// lost: a lost report is folded exactly like an expiry: a run fails, "worker
// lost"; an evaluation is queued again, or cancelled if it was revoked, or
// fails "lost N times" if it was queued again as often as its cap allows
// (its leases are then its cap and one). That it is no attempt, the table
// check says (attempts == lease.reported).
func (k *checker) lost(e *event.Event) {
	j, ok := k.fold.Job(e.Job)
	if !ok {
		k.s.fail("lease %d reported lost: job %s is not in the fold", e.Lease, e.Job)
		return
	}
	switch {
	case j.Kind == event.KindRun && j.State == fsm.Failed && j.Reason == event.ReasonWorkerLost:
	case j.Kind == event.KindEvaluation && j.State == fsm.Queued && j.Lease == 0:
	case j.Kind == event.KindEvaluation && j.State == fsm.Cancelled && j.Reason == event.ReasonRevokedLost:
	case j.Kind == event.KindEvaluation && j.State == fsm.Failed && j.MaxRequeues > 0 &&
		j.Leases == j.MaxRequeues+1 && j.Reason == event.LostTimes(j.Leases):
	default:
		k.s.fail("lease %d reported lost left %s job %s %s (%q), not as an expiry would", e.Lease, j.Kind, e.Job, j.State, j.Reason)
	}
}

// present is how much of [from, to] the daemon was present for.
func (k *checker) present(from, to time.Duration) time.Duration {
	d := to - from
	for _, a := range k.absent_ {
		if o := min(to, a.to) - max(from, a.from); o > 0 {
			d -= o
		}
	}
	return d
}

// absent records an absence of the daemon (a sleep past grace, a crash): it
// must not count against anyone.
func (k *checker) absent(from, to time.Duration, counts bool) {
	if counts {
		k.absent_ = append(k.absent_, span{from, to})
	}
}

// expectResume: the daemon woke from a sleep past grace. The first event
// it appends next, by a sweep or by a command, is daemon.resumed with (at
// least) the whole sleep as its gap, before anything is decided. What is
// decided next was due when the daemon was last present (its last sweep or
// command before the sleep, which may come after the last sweep): the
// oracle in observe judges each expiry with the sleep taken out.
func (k *checker) expectResume(slept time.Duration) { k.resume = slept }

func (k *checker) resumed(what string, evs []event.Event) {
	slept := k.resume
	k.resume = 0
	if evs[0].Type != event.TypeDaemonResumed || time.Duration(evs[0].Gap) < slept {
		k.s.fail("the first step to write after a sleep of %v (%s) appended %s first, want daemon.resumed with the gap", slept, what, evs[0].String())
	}
}

// skipResumed drops the daemon.resumed a command may record first.
func skipResumed(evs []event.Event) []event.Event {
	if len(evs) > 0 && evs[0].Type == event.TypeDaemonResumed {
		return evs[1:]
	}
	return evs
}

// table checks the live table: fold(log) == live, one live lease per job,
// attempts counted once.
func (k *checker) table(what string) {
	d := k.s.daemon
	var snap []byte
	var live []projection.Lease
	if err := d.svc.View(bg, func(t *projection.Table) {
		snap = t.Snapshot()
		live = t.Leases(projection.LeaseFilter{})
	}); err != nil {
		k.s.fail("read the table: %v", err)
		return
	}
	if !slices.Equal(k.fold.Snapshot(), snap) {
		k.s.fail("after %s: fold(log) != live table\n--- fold\n%s", what, k.fold)
		return
	}
	// Rebuilding from the store (newest snapshot + tail) every step made it
	// a fifth of a run's cost; every rebuildEvery steps still crosses every
	// snapshot the service writes (SnapshotEvery), and every restart
	// rebuilds and compares in full (daemon.restart).
	k.checks++
	if k.checks%rebuildEvery == 0 {
		rebuilt, _, err := replay.Rebuild(d.log, zerolog.Nop())
		if err != nil {
			k.s.fail("after %s: rebuild: %v", what, err)
			return
		}
		if !slices.Equal(rebuilt.Snapshot(), snap) {
			k.s.fail("after %s: snapshot + tail != live table\n--- rebuilt\n%s", what, rebuilt)
			return
		}
	}
	byJob := map[string]uint64{}
	for _, l := range live {
		if other, dup := byJob[l.Job]; dup {
			k.s.fail("job %s has two live leases, %d and %d", l.Job, other, l.ID)
			return
		}
		byJob[l.Job] = l.ID
	}
	// Every job, those that ended included: the checker's own fold keeps
	// them (RetireKeep), and equals the live table in what both hold; the
	// archive is compared with it by Verify at every restart and at the end.
	for _, j := range k.fold.Jobs(projection.JobFilter{}) {
		if j.Lease != byJob[j.ID] {
			k.s.fail("job %s names live lease %d, the table holds %d", j.ID, j.Lease, byJob[j.ID])
		}
		if j.Attempts != k.reported[j.ID] || j.Attempts > 1 || (j.State == fsm.Reported) != (j.Attempts == 1) {
			k.s.fail("job %s is %s with %d attempts and %d lease.reported events", j.ID, j.State, j.Attempts, k.reported[j.ID])
		}
	}
}

// heartbeat: a heartbeat records one lease.heartbeat per lease it renews,
// and nothing for a lease answered gone.
func (k *checker) heartbeat(r reqHeartbeat, reply any, err error, before uint64) {
	evs := skipResumed(k.eventsSince(before))
	if len(evs) > 0 && evs[0].Type == event.TypeWorkerReachable {
		evs = evs[1:]
	}
	var want []uint64
	if err == nil {
		for _, d := range reply.(api.HeartbeatReply).Leases {
			if d.Directive != "gone" {
				want = append(want, d.Lease)
			}
		}
	}
	var got []uint64
	for _, e := range evs {
		if e.Type != event.TypeHeartbeat || e.Worker != r.worker {
			k.s.fail("heartbeat of %s appended %s", r.worker, e.String())
			return
		}
		got = append(got, e.Lease)
	}
	if !slices.Equal(got, want) {
		k.s.fail("heartbeat of %s %v answered %v and renewed %v", r.worker, r.leases, reply, got)
	}
}

// start: a refused start records nothing.
func (k *checker) start(r reqStart, err error, before uint64) {
	if err != nil {
		if evs := skipResumed(k.eventsSince(before)); len(evs) > 0 {
			k.s.fail("start of lease %d by %s was refused (%v) and appended %s", r.lease, r.worker, err, evs[0].String())
		}
	}
}

// snapshot is the live table's, for the crash check.
func (k *checker) snapshot() []byte {
	var snap []byte
	_ = k.s.daemon.svc.View(bg, func(t *projection.Table) { snap = t.Snapshot() })
	return snap
}

// runStarted: no other run of the job may be executing now.
func (k *checker) runStarted(r *simRun) {
	iv := &interval{job: r.job, w: r.m.w, lease: r.lease, from: k.s.now, to: -1}
	r.iv = iv
	for _, o := range k.open[r.job] {
		k.violation(o, fmt.Sprintf("job %s RUNS TWICE: on %s since %.4fs (lease %d) and now on %s (lease %d)",
			r.job, o.w.id, o.from.Seconds(), o.lease, r.m.w.id, r.lease))
	}
	k.open[r.job] = append(k.open[r.job], iv)
	k.running[r.lease] = iv
	k.runs[r.lease] = r
}

// runEnded: the run's execution ended at to (now, or the suspend it never
// woke from).
func (k *checker) runEnded(r *simRun, to time.Duration) {
	r.iv.to = to
	delete(k.running, r.lease)
	k.open[r.job] = slices.DeleteFunc(k.open[r.job], func(o *interval) bool { return o == r.iv })
}

// stopped: lease e.Lease ended (expired, or reported lost) on the daemon,
// so its job must have stopped.
func (k *checker) stopped(e *event.Event, what, why string) {
	if iv := k.running[e.Lease]; iv != nil {
		k.violation(iv, fmt.Sprintf("lease %d (job %s) %s on %s (since %.4fs): %s", e.Lease, e.Job, what, iv.w.id, iv.from.Seconds(), why))
	}
}

// violation fails the run, or, for a job on a suspended host, waits for the
// wake: a job killed then never ran again.
func (k *checker) violation(iv *interval, msg string) {
	if iv.frozen {
		if iv.pending == "" {
			iv.pending = fmt.Sprintf("t=%.4fs: %s, and it ran on when its host woke", k.s.now.Seconds(), msg)
		}
		return
	}
	k.s.fail("%s", msg)
}

// suspended: the jobs on m's host stand still.
func (k *checker) suspended(m *machine) {
	for _, iv := range k.onHost(m) {
		iv.frozen = true
	}
}

// woke: m's host woke; its supervisors have killed what was past its
// deadline (those executions ended at the suspend). What runs on must not
// have been overtaken meanwhile.
func (k *checker) woke(m *machine) {
	for _, iv := range k.onHost(m) {
		iv.frozen = false
		if iv.pending != "" {
			k.s.fail("%s", iv.pending)
		}
	}
}

func (k *checker) onHost(m *machine) []*interval {
	var out []*interval
	for _, id := range slices.Sorted(maps.Keys(k.running)) {
		if iv := k.running[id]; iv.w == m.w {
			out = append(out, iv)
		}
	}
	return out
}

// submitting: a client sends job id for the first time.
func (k *checker) submitting(id string) { k.submitted[id] = true }

func (k *checker) livenessBound() time.Duration {
	// Routing may leave a class of jobs to one worker: the bound counts
	// the smallest capacity as the whole (route.go).
	n, c := 0, 0
	for _, w := range k.s.workers {
		if c == 0 || w.capacity < c {
			c = w.capacity
		}
	}
	ended := map[string]bool{}
	for _, j := range k.jobs() {
		ended[j.ID] = j.State.Terminal()
	}
	for id := range k.submitted {
		if !ended[id] {
			n++
		}
	}
	return livenessBound(n, c, k.s.own.longest) + maxNotBefore
}

func (k *checker) startLiveness() { k.deadline = k.s.now + k.livenessBound() }

func (k *checker) jobs() []projection.Job {
	d := k.s.daemon
	if d == nil || !d.up {
		return nil
	}
	js, err := d.svc.Jobs(bg, projection.JobFilter{})
	if err != nil {
		k.s.fail("list jobs: %v", err)
	}
	return js
}

// liveness reports whether every job has ended and nothing more can be
// submitted; past the deadline it is a violation.
func (k *checker) liveness() (done bool, err error) {
	pending := 0
	for _, c := range k.s.clients {
		pending += c.pending
	}
	open := 0
	if pending == 0 {
		_ = k.s.daemon.svc.View(bg, func(t *projection.Table) {
			for _, st := range fsm.States() {
				if !st.Terminal() {
					open += t.JobCount(st)
				}
			}
		})
		if open == 0 {
			k.s.stats.Quiet = k.s.now
			k.s.tracef("QUIET: every job has ended")
			return true, nil
		}
	}
	if k.s.now <= k.deadline {
		return false, nil
	}
	var stuck []string
	for _, j := range k.jobs() {
		if !j.State.Terminal() {
			stuck = append(stuck, fmt.Sprintf("%s (%s, lease %d)", j.ID, j.State, j.Lease))
		}
	}
	return false, fmt.Errorf("t=%.4fs: LIVENESS: %v after the faults stopped, jobs not ended: %s; submissions unanswered: %d",
		k.s.now.Seconds(), k.deadline-k.s.stats.Healed, strings.Join(stuck, ", "), pending)
}

// final checks the whole log once the run is over: every event a legal
// transition, no gaps, every snapshot equal to the fold at its seq.
func (k *checker) final() error {
	d := k.s.daemon
	if d == nil || !d.up {
		return nil
	}
	if _, err := replay.Verify(d.log); err != nil {
		return fmt.Errorf("replay.Verify at the end: %w", err)
	}
	return nil
}
