package sim

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/internal/clocktest"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/replay"
)

// checker holds the invariants of DESIGN §7 after every step:
//
//  1. no job runs on two workers at once: the execution intervals of a job's
//     runs (start to the moment a stop takes effect) never overlap; sharper,
//     the worker fences before the daemon expires: when a lease expires, its
//     job has stopped. Both except for a run whose worker was paused past
//     pauseBound just then, or died while it ran;
//  2. nothing acknowledged is lost across a crash (the table rebuilt from the
//     crash image equals the one before it); the log has no gaps and replays;
//  3. fold(log) == live table: an incremental fold of every event appended
//     equals the live table's Snapshot after every step, and so does Rebuild
//     (snapshot + tail) every rebuildEvery steps and after every crash;
//  4. tokens of a job strictly grow; a stale call changes nothing and a stale
//     report is always recorded (and the same one answered the same);
//  5. a report on the current lease gets its first answer forever; attempts
//     equal accepted reports, at most one;
//  6. the daemon's absence expires nothing: every lease.expired (and every
//     worker.unreachable) comes after more than toleration (grace) of silence
//     not counting the daemon's absences; a sleep past grace is recorded as
//     daemon.resumed by the first sweep, which decides nothing else;
//
// plus liveness: once the faults stop, every job ends within livenessBound.
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
	long     map[*simWorker][]span    // pauses past pauseBound

	submitted map[string]bool
	deadline  time.Duration
	checks    int // table checks so far
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
	orphaned bool // its worker died while it ran on
}

func newChecker(s *Sim) *checker {
	return &checker{s: s, fold: projection.New(),
		tokens: map[string]uint64{}, leases: map[uint64]string{}, heard: map[uint64]time.Duration{},
		seen: map[string]time.Duration{}, answers: map[uint64]uint64{}, reported: map[string]int{}, stale: map[string]uint64{},
		open: map[string][]*interval{}, running: map[uint64]*interval{}, long: map[*simWorker][]span{}, submitted: map[string]bool{}}
}

// eventsSince reads the events appended after seq before.
func (k *checker) eventsSince(before uint64) []eventlog.Event {
	d := k.s.daemon
	if d == nil || !d.up {
		return nil
	}
	var out []eventlog.Event
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
func (k *checker) afterDaemon(what string, before uint64) []eventlog.Event {
	evs := k.eventsSince(before)
	if len(evs) == 0 {
		return nil
	}
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
	k.table(what)
	return evs
}

// observe keeps what later checks need of an event, and checks tokens and
// the daemon's absence.
func (k *checker) observe(e *eventlog.Event) {
	t := time.Duration(e.Time - clocktest.Epoch.UnixNano())
	k.s.hist.observe(e, t)
	switch e.Type {
	case eventlog.TypeAcquired:
		if prev := k.tokens[e.Job]; e.Lease <= prev {
			k.s.fail("job %s: token %d granted after %d", e.Job, e.Lease, prev)
		}
		k.tokens[e.Job] = e.Lease
		k.leases[e.Lease] = e.Job
		k.heard[e.Lease], k.seen[e.Worker] = t, t
		k.s.stats.Leases++
	case eventlog.TypeRunning, eventlog.TypeHeartbeat:
		k.heard[e.Lease], k.seen[e.Worker] = t, t
	case eventlog.TypeReported:
		k.seen[e.Worker] = t
		k.reported[e.Job]++
	case eventlog.TypeWorkerReachable:
		k.seen[e.Worker] = t
	case eventlog.TypeQueued:
		if e.Kind != 0 {
			k.s.stats.Jobs++
		}
	case eventlog.TypeStaleReport:
		k.s.stats.Stale++
	case eventlog.TypeExpired:
		k.s.stats.Expired++
		if silent := k.present(k.heard[e.Lease], t); silent <= toleration {
			k.s.fail("lease %d (job %s) expired after %v of silence once the daemon's absences are taken out: not more than toleration", e.Lease, e.Job, silent)
		}
		// The worker fences before the daemon expires (§7.1): by now the
		// lease's job must have stopped.
		if iv := k.running[e.Lease]; iv != nil {
			if why := k.excused(iv); why != "" {
				k.s.stats.Excused++
				k.s.tracef("  (lease %d expired while its job still runs on %s: excused, %s)", e.Lease, iv.w.id, why)
			} else {
				k.s.fail("lease %d (job %s) EXPIRED WHILE ITS JOB STILL RUNS on %s (since %.4fs): the worker did not fence in time",
					e.Lease, e.Job, iv.w.id, iv.from.Seconds())
			}
		}
	case eventlog.TypeWorkerUnreachable:
		if silent := k.present(k.seen[e.Worker], t); silent <= grace {
			k.s.fail("worker %s marked unreachable after %v of silence once the daemon's absences are taken out: not more than grace", e.Worker, silent)
		}
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

// resumed: the first sweep after a sleep past grace appends daemon.resumed
// with (at least) the whole sleep as its gap, first. When the daemon's last
// tick before the sleep was a sweep, which decided everything due then, it
// decides nothing else: the absence expires nothing. (After a restart the
// last tick is the start, which decides nothing: what was due at the last
// event before the crash is decided now, by the same present time. The
// oracle in observe covers both.)
func (k *checker) resumed(before uint64, slept time.Duration, swept bool) {
	evs := k.eventsSince(before)
	ok := len(evs) > 0 && evs[0].Type == eventlog.TypeDaemonResumed && time.Duration(evs[0].Gap) >= slept
	if !ok || (swept && len(evs) != 1) {
		var types []string
		for _, e := range evs {
			types = append(types, e.String())
		}
		k.s.fail("the first sweep after a sleep of %v appended %v, want daemon.resumed with the gap first (and alone after a sweep)", slept, types)
	}
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
	evs := k.eventsSince(before)
	if len(evs) > 0 && evs[0].Type == eventlog.TypeWorkerReachable {
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
		if e.Type != eventlog.TypeHeartbeat || e.Worker != r.worker {
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
		if evs := k.eventsSince(before); len(evs) > 0 {
			k.s.fail("start of lease %d by %s was refused (%v) and appended %s", r.lease, r.worker, err, evs[0].String())
		}
	}
}

// views is the table as the report check compares it.
type views struct {
	jobs    []projection.Job
	leases  []projection.Lease
	workers []projection.Worker
}

// views reads them through the service, which answers from the table and
// the archive.
func (k *checker) views() views {
	var v views
	d := k.s.daemon
	_ = d.svc.View(bg, func(t *projection.Table) { v.workers = t.Workers() })
	var err error
	if v.jobs, err = d.svc.Jobs(bg, projection.JobFilter{}); err != nil {
		k.s.fail("list jobs: %v", err)
	}
	for _, st := range []fsm.State{fsm.Acquired, fsm.Running, fsm.Reported, fsm.Expired} {
		ls, err := d.svc.Leases(bg, projection.LeaseFilter{State: st})
		if err != nil {
			k.s.fail("list %s leases: %v", st, err)
		}
		v.leases = append(v.leases, ls...)
	}
	return v
}

// report: a stale report changes nothing in the table, is recorded with
// what it said, and the same one is answered the same; an accepted report's
// answer never changes.
func (k *checker) report(r reqReport, before views, reply any, err error) {
	var ae *api.Error
	switch {
	case err == nil:
		a := reply.(api.ReportReply)
		if first, ok := k.answers[r.lease]; ok && first != a.Seq {
			k.s.fail("lease %d: first answer seq %d, now seq %d", r.lease, first, a.Seq)
		}
		k.answers[r.lease] = a.Seq
		if e, gerr := k.s.daemon.log.Get(a.Seq); gerr != nil || e.Type != eventlog.TypeReported || e.Lease != r.lease {
			k.s.fail("report on lease %d answered seq %d, which holds %s (%v)", r.lease, a.Seq, e.String(), gerr)
		}
	case errors.As(err, &ae) && ae.Code == api.CodeStaleLease:
		after := k.views()
		if !reflect.DeepEqual(after.jobs, before.jobs) || !slices.Equal(after.leases, before.leases) || !slices.Equal(after.workers, before.workers) {
			k.s.fail("a stale report on lease %d changed the table", r.lease)
		}
		e, gerr := k.s.daemon.log.Get(ae.StaleReportSeq)
		if gerr != nil || e.Type != eventlog.TypeStaleReport || e.Lease != r.lease || e.Worker != r.r.Worker ||
			e.Outcome.String() != r.r.Outcome || e.Ref != r.r.Ref || e.Reason != r.r.Reason {
			k.s.fail("stale report on lease %d answered seq %d, which holds %s (%v)", r.lease, ae.StaleReportSeq, e.String(), gerr)
		}
		key := fmt.Sprint(r.lease, r.r.Worker, r.r.Outcome, r.r.Ref, r.r.Reason, string(r.r.Result))
		if first, ok := k.stale[key]; ok && first != ae.StaleReportSeq {
			k.s.fail("the same stale report on lease %d answered seq %d, then seq %d", r.lease, first, ae.StaleReportSeq)
		}
		k.stale[key] = ae.StaleReportSeq
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
		if why := k.excused(o); why != "" {
			k.s.stats.Excused++
			k.s.tracef("  (job %s now runs twice, on %s (lease %d) and %s (lease %d): excused, %s)", r.job, o.w.id, o.lease, r.m.w.id, r.lease, why)
			continue
		}
		k.s.fail("job %s RUNS TWICE: on %s since %.4fs (lease %d) and now on %s (lease %d)",
			r.job, o.w.id, o.from.Seconds(), o.lease, r.m.w.id, r.lease)
	}
	k.open[r.job] = append(k.open[r.job], iv)
	k.running[r.lease] = iv
}

func (k *checker) runEnded(r *simRun) {
	r.iv.to = k.s.now
	delete(k.running, r.lease)
	k.open[r.job] = slices.DeleteFunc(k.open[r.job], func(o *interval) bool { return o == r.iv })
}

// excused says why a run may still execute past its lease: its worker was
// paused past pauseBound just now, or died while it ran. A pause that ended
// more than a few renews ago is no excuse: once resumed, a worker checks its
// fence within renew/4 and a kill takes effect within killDelay.
func (k *checker) excused(o *interval) string {
	if o.orphaned {
		return "its worker died while it ran on"
	}
	for _, p := range k.long[o.w] {
		if p.to > max(o.from, k.s.now-3*renew) && p.from < k.s.now {
			return fmt.Sprintf("its worker was paused for %v, past the bound of %v", p.to-p.from, pauseBound)
		}
	}
	return ""
}

func (k *checker) pausedFor(w *simWorker, d time.Duration) {
	if d > pauseBound {
		k.s.stats.LongPauses++
		k.long[w] = append(k.long[w], span{k.s.now, k.s.now + d})
	}
}

// diedFor: the runs of a dead worker that go on are watched by nobody.
func (k *checker) diedFor(w *simWorker, _ time.Duration, runsSurvive bool) {
	if !runsSurvive {
		return
	}
	for _, job := range slices.Sorted(maps.Keys(k.open)) {
		for _, o := range k.open[job] {
			if o.w == w {
				o.orphaned = true
			}
		}
	}
}

// submitting: a client sends job id for the first time.
func (k *checker) submitting(id string) { k.submitted[id] = true }

func (k *checker) livenessBound() time.Duration {
	n, c := 0, 0
	for _, w := range k.s.workers {
		c += w.capacity
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
	return livenessBound(n, c)
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
