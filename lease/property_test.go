package lease_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand"
	randv2 "math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"
	"pgregory.net/rapid"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/replay"
)

var ctx = context.Background()

// testConfig is the fixture's timing, which the tests compute their steps from.
var testConfig = leasetest.Timing()

// harness runs a lease.Service on a crashable in-memory store with the
// daemon's own clock fed by two manual ones — the wall clock, and the boot
// clock that the service counts by within a life — and keeps what the
// property test must remember about its answers.
type harness struct {
	t     *rapid.T
	fs    *vfs.MemFS
	clock *clocktest.Clock // CLOCK_BOOTTIME: time as the daemon counts it within a life
	wall  *clocktest.Clock // the wall clock: read at each start
	log   *eventlog.Log
	svc   *lease.Service

	tokens    map[string][]uint64     // job -> tokens granted, in order
	accepted  map[uint64]lease.Answer // lease -> the first accepted answer
	firsts    map[uint64]lease.Report // lease -> the report accepted first
	stale     map[string]lease.Answer // stale report content -> its first answer
	reports   map[uint64]bool         // leases ever reported
	allLeases []uint64
	holder    map[uint64]string // lease -> the worker it was granted to
}

func newHarness(t *rapid.T) *harness {
	h := &harness{
		t: t, fs: vfs.NewCrashableMem(), clock: clocktest.New(clocktest.Epoch), wall: clocktest.New(clocktest.Epoch),
		tokens: map[string][]uint64{}, accepted: map[uint64]lease.Answer{}, firsts: map[uint64]lease.Report{}, stale: map[string]lease.Answer{},
		reports: map[uint64]bool{}, holder: map[uint64]string{},
	}
	h.open()
	return h
}

func (h *harness) open() {
	h.log, h.svc = leasetest.Open(h.t, leasetest.FS(h.fs), leasetest.Service(func(o *lease.Options) {
		o.Wall, o.Boot, o.Entropy, o.SnapshotEvery = h.wall, h.clock, rand.New(rand.NewSource(7)), 25
		o.HeartbeatRetention = 2 * time.Second // the compact action folds the heartbeats of jobs ended that long ago
	}))
}

func (h *harness) close() { _ = h.log.Close() }

// pass lets d of time pass: both clocks count it.
func (h *harness) pass(d time.Duration) {
	h.clock.Advance(d)
	h.wall.Advance(d)
}

func (h *harness) table() (snap []byte, jobs []projection.Job, leases []projection.Lease, workers []projection.Worker) {
	// The table holds what is live; jobs and leases that ended are in the
	// archive, which the service's queries read too.
	err := h.svc.View(ctx, func(t *projection.Table) {
		snap = t.Snapshot()
		workers = t.Workers()
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if jobs, err = h.svc.Jobs(ctx, projection.JobFilter{}); err != nil {
		h.t.Fatal(err)
	}
	// The states a lease can be in; each ended one is a scan of the archive,
	// which Pebble's race-build invariants make slow.
	for _, s := range []fsm.State{fsm.Acquired, fsm.Running, fsm.Reported, fsm.Expired} {
		ls, err := h.svc.Leases(ctx, projection.LeaseFilter{State: s})
		if err != nil {
			h.t.Fatal(err)
		}
		leases = append(leases, ls...)
	}
	return
}

var (
	jobIDs    = rapid.SampledFrom([]string{"j0", "j1", "j2", "j3", "j4"})
	workerIDs = rapid.SampledFrom([]string{"w0", "w1", "w2"})
	kinds     = rapid.SampledFrom([]event.Kind{event.KindRun, event.KindEvaluation})
	outcomes  = rapid.SampledFrom([]event.Outcome{event.OutcomeSucceeded, event.OutcomeFailed, event.OutcomeCancelled, event.OutcomeKilled, event.OutcomeLost})
	refs      = rapid.SampledFrom([]string{"", "refs/a", "refs/b"})
	reasons   = rapid.SampledFrom([]string{"", "done", "report refused (400 bad_request: x); sent again without result and ref"})
	results   = rapid.SampledFrom([]string{"", `{"a":1}`, `{"a":2}`})
)

// someReport draws a report: what it says, each part from a few values, so
// that reports on one lease often say the same and often do not.
func someReport(t *rapid.T) lease.Report {
	r := lease.Report{Outcome: outcomes.Draw(t, "outcome"), Ref: refs.Draw(t, "ref"), Reason: reasons.Draw(t, "reason")}
	if res := results.Draw(t, "result"); res != "" {
		r.Result = []byte(res)
	}
	return r
}

// retryOf reports whether r, on a lease whose first accepted report was
// first, is a retry of it: the same outcome, and a ref and a result each
// left out or the first's; the reason is not compared.
func retryOf(first, r lease.Report) bool {
	return r.Outcome == first.Outcome && (r.Ref == "" || r.Ref == first.Ref) &&
		(len(r.Result) == 0 || string(r.Result) == string(first.Result))
}

func (h *harness) someLease(t *rapid.T) uint64 {
	if len(h.allLeases) == 0 || rapid.IntRange(0, 9).Draw(t, "unknown") == 0 {
		return rapid.Uint64Range(1, 500).Draw(t, "lease")
	}
	return rapid.SampledFrom(h.allLeases).Draw(t, "lease")
}

// call picks who calls about which lease: mostly a lease's own holder, so
// that calls land; sometimes anyone about anything, so that refusals are
// exercised too.
func (h *harness) call(t *rapid.T) (string, uint64) {
	if len(h.allLeases) > 0 && rapid.IntRange(0, 3).Draw(t, "own") > 0 {
		id := rapid.SampledFrom(h.allLeases).Draw(t, "lease")
		return h.holder[id], id
	}
	return workerIDs.Draw(t, "worker"), h.someLease(t)
}

// actions are the steps rapid draws from, uniformly; an action listed under
// several names is drawn that much more often.
func (h *harness) actions() map[string]func(*rapid.T) {
	a := h.baseActions()
	for _, name := range []string{"tick", "acquire", "heartbeat", "report", "start", "submit", "nap"} {
		a[name+"-again"] = a[name]
	}
	a["tick-more"] = a["tick"]
	h.roundActions(a) // rounds_property_test.go
	// Compaction changes no answer and no table: every check after it holds
	// as before.
	a["compact"] = func(t *rapid.T) {
		if _, _, err := h.svc.Compact(); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func (h *harness) baseActions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"submit": func(t *rapid.T) {
			spec := rapid.SampledFrom([]string{`{"run":"a"}`, `{"run":"b"}`}).Draw(t, "spec")
			it := lease.SubmitItem{ID: jobIDs.Draw(t, "job"), Kind: kinds.Draw(t, "kind"), Spec: []byte(spec)}
			// An evaluation with a small cap, lost a few times, fails.
			if n := rapid.IntRange(-1, 2).Draw(t, "max_requeues"); n >= 0 && it.Kind == event.KindEvaluation {
				it.MaxRequeues = &n
			}
			_, _, err := h.svc.SubmitItem(ctx, it)
			if err != nil && !errors.Is(err, lease.ErrJobExists) && !errors.Is(err, lease.ErrStopping) {
				t.Fatal(err)
			}
		},
		"acquire": func(t *rapid.T) {
			w := workerIDs.Draw(t, "worker")
			gs, err := h.svc.Acquire(ctx, w, rapid.IntRange(1, 3).Draw(t, "max"))
			if err != nil && !errors.Is(err, lease.ErrStopping) {
				t.Fatal(err)
			}
			for _, g := range gs {
				prev := h.tokens[g.Job.ID]
				if len(prev) > 0 && g.Lease <= prev[len(prev)-1] {
					t.Fatalf("job %s: token %d granted after %d", g.Job.ID, g.Lease, prev[len(prev)-1])
				}
				h.tokens[g.Job.ID] = append(prev, g.Lease)
				h.allLeases = append(h.allLeases, g.Lease)
				h.holder[g.Lease] = w
			}
		},
		"start": func(t *rapid.T) {
			w, id := h.call(t)
			_, err := h.svc.Start(ctx, w, id)
			if err != nil && !errors.Is(err, lease.ErrNotFound) && !errors.Is(err, lease.ErrWrongWorker) && !errors.Is(err, lease.ErrStaleLease) {
				t.Fatal(err)
			}
		},
		"heartbeat": func(t *rapid.T) {
			w, id := h.call(t)
			ids := append(rapid.SliceOfN(rapid.Custom(h.someLease), 0, 3).Draw(t, "leases"), id)
			ds, err := h.svc.Heartbeat(ctx, w, ids)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				l, err := h.svc.Lease(ctx, d.Lease)
				live := err == nil && l.Worker == w && l.Live()
				if live != (d.Directive != lease.Gone) {
					t.Fatalf("lease %d (%+v) of %s answered %s", d.Lease, l, w, d.Directive)
				}
			}
		},
		"report":       func(t *rapid.T) { h.report(t) },
		"report-again": func(t *rapid.T) { h.reportAgain(t) },
		"cancel": func(t *rapid.T) {
			id := jobIDs.Draw(t, "job")
			var err error
			if rapid.Bool().Draw(t, "kill") {
				_, err = h.svc.Kill(ctx, id)
			} else {
				_, err = h.svc.Cancel(ctx, id)
			}
			if err != nil && !errors.Is(err, lease.ErrNotFound) {
				t.Fatal(err)
			}
		},
		"tick": func(t *rapid.T) {
			h.pass(rapid.SampledFrom([]time.Duration{100 * time.Millisecond, time.Second, 3 * time.Second, testConfig.Grace, testConfig.Grace}).Draw(t, "d"))
			if err := h.svc.Sweep(); err != nil {
				t.Fatal(err)
			}
		},
		"sleep": func(t *rapid.T) {
			// The daemon is absent past grace and maybe past toleration: the next
			// sweep must record the absence and expire nothing.
			d := rapid.Int64Range(int64(testConfig.Grace)+1, 3*int64(testConfig.Toleration)).Draw(t, "d")
			before := h.log.LastSeq()
			h.pass(time.Duration(d))
			if err := h.svc.Sweep(); err != nil {
				t.Fatal(err)
			}
			evs := h.eventsAfter(before)
			if len(evs) != 1 || evs[0].Type != event.TypeDaemonResumed || evs[0].Gap < d {
				t.Fatalf("sweep after an absence of %v appended %v", time.Duration(d), evs)
			}
		},
		"nap": func(t *rapid.T) {
			// The daemon is absent past grace and a command comes before any
			// sweep: the command records the absence before anything else, and
			// nothing expires; one that records nothing leaves the absence for
			// the next sweep.
			d := rapid.Int64Range(int64(testConfig.Grace)+1, 3*int64(testConfig.Toleration)).Draw(t, "d")
			before := h.log.LastSeq()
			h.pass(time.Duration(d))
			w, id := h.call(t)
			if _, err := h.svc.Heartbeat(ctx, w, []uint64{id}); err != nil {
				t.Fatal(err)
			}
			if err := h.svc.Sweep(); err != nil {
				t.Fatal(err)
			}
			evs := h.eventsAfter(before)
			if len(evs) == 0 || evs[0].Type != event.TypeDaemonResumed || evs[0].Gap < d {
				t.Fatalf("a heartbeat and a sweep after an absence of %v appended %v", time.Duration(d), evs)
			}
			for _, e := range evs[1:] {
				if e.Type != event.TypeHeartbeat && e.Type != event.TypeWorkerReachable {
					t.Fatalf("after an absence of %v: %s", time.Duration(d), e.String())
				}
			}
		},
		"wall-step": func(t *rapid.T) {
			// Someone sets the wall clock, by any amount, either way: within
			// the life nothing moves, so the next sweep finds nothing due that
			// the last did not decide (every step that lets time pass sweeps). (At the next start the step is part of
			// the downtime: counted as absence, or, backwards, as none.)
			d := rapid.Int64Range(-3*int64(testConfig.Toleration), 3*int64(testConfig.Toleration)).Draw(t, "step")
			before := h.log.LastSeq()
			h.wall.Advance(time.Duration(d))
			if err := h.svc.Sweep(); err != nil {
				t.Fatal(err)
			}
			if evs := h.eventsAfter(before); len(evs) != 0 {
				t.Fatalf("a wall-clock step of %v: the sweep appended %v", time.Duration(d), evs)
			}
		},
		"crash": func(t *rapid.T) {
			snap, jobs, leases, _ := h.table()
			clone := h.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: randv2.New(randv2.NewPCG(1, 2))})
			h.close()
			h.fs = clone
			h.pass(time.Duration(rapid.Int64Range(0, 3*int64(testConfig.Toleration)).Draw(t, "downtime")))
			log, err := eventlog.Open("data", eventlog.Options{FS: h.fs, Logger: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			rebuilt, _, err := replay.Rebuild(log, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rebuilt.Snapshot(), snap) {
				t.Fatalf("table after crash differs from the one before:\n%s", rebuilt)
			}
			_ = log.Close()
			h.open()
			if _, jobs2, leases2, _ := h.table(); !reflect.DeepEqual(jobs2, jobs) || !reflect.DeepEqual(leases2, leases) {
				t.Fatalf("jobs and leases after the crash differ from those before:\n%v\n%v\nwant\n%v\n%v", jobs2, leases2, jobs, leases)
			}
			// The downtime is absence: the first sweep expires nothing.
			before := h.log.LastSeq()
			if err := h.svc.Sweep(); err != nil {
				t.Fatal(err)
			}
			if evs := h.eventsAfter(before); len(evs) != 0 {
				t.Fatalf("first sweep after a restart appended %v", evs)
			}
		},
		"stop": func(t *rapid.T) {
			queued := rapid.SampledFrom([]lease.QueuePolicy{lease.CancelQueued, lease.KeepQueued}).Draw(t, "queued")
			if err := h.svc.Stop(ctx, queued); err != nil {
				t.Fatal(err)
			}
			if err := h.svc.Close(); err != nil {
				t.Fatal(err)
			}
			h.close()
			h.open()
		},
		"": func(t *rapid.T) { h.check(t) },
	}
}

// report sends a report and checks the answers (see judge).
func (h *harness) report(t *rapid.T) {
	w, id := h.call(t)
	h.reportWith(t, w, id, someReport(t))
}

// reportAgain sends a report on a lease already reported, by its holder:
// the first report, or one that differs from it in some of its parts.
func (h *harness) reportAgain(t *rapid.T) {
	if len(h.firsts) == 0 {
		return
	}
	id := rapid.SampledFrom(slices.Sorted(maps.Keys(h.firsts))).Draw(t, "reported")
	r, other := h.firsts[id], someReport(t)
	if rapid.Bool().Draw(t, "other outcome") {
		r.Outcome = other.Outcome
	}
	if rapid.Bool().Draw(t, "other ref") {
		r.Ref = other.Ref
	}
	if rapid.Bool().Draw(t, "other result") {
		r.Result = other.Result
	}
	r.Reason = other.Reason
	h.reportWith(t, h.holder[id], id, r)
}

func (h *harness) reportWith(t *rapid.T, w string, id uint64, r lease.Report) {
	_, jobsBefore, leasesBefore, workersBefore := h.table()
	a, err := h.svc.Report(ctx, w, id, r)
	h.judge(t, w, id, r, a, err, jobsBefore, leasesBefore, workersBefore)
}

// judge checks the answer a, err to worker w's report r on lease id: on a
// lease already reported, a retry of its first report gets the first
// answer, which never changes, and any other report is stale; a stale
// report changes nothing in the table (as it was before: jobs, leases,
// workers), is recorded with what it said, and the same stale report gets
// the same answer.
func (h *harness) judge(t *rapid.T, w string, id uint64, r lease.Report, a lease.Answer, err error,
	jobsBefore []projection.Job, leasesBefore []projection.Lease, workersBefore []projection.Worker) {
	first, reported := h.firsts[id]
	switch {
	case errors.Is(err, lease.ErrNotFound), errors.Is(err, lease.ErrWrongWorker):
	case errors.Is(err, lease.ErrStaleLease):
		if reported && retryOf(first, r) {
			t.Fatalf("lease %d: a retry %+v of the first report %+v answered stale: %v", id, r, first, err)
		}
		_, jobs, leases, workers := h.table()
		if !reflect.DeepEqual(jobs, jobsBefore) || !reflect.DeepEqual(leases, leasesBefore) || !slices.Equal(workers, workersBefore) {
			t.Fatalf("stale report on lease %d changed the table", id)
		}
		rec, err := h.log.Get(a.Seq)
		if err != nil || rec.Type != event.TypeStaleReport || rec.Lease != id || rec.Ref != r.Ref || rec.Outcome != r.Outcome ||
			rec.Worker != w || rec.Reason != r.Reason || string(rec.Result) != string(r.Result) {
			t.Fatalf("stale report answered seq %d, which holds %+v (%v)", a.Seq, rec, err)
		}
		key := fmt.Sprint(id, w, r.Outcome, r.Ref, r.Reason, string(r.Result))
		if first, ok := h.stale[key]; ok && first != a {
			t.Fatalf("the same stale report answered %+v, then %+v", first, a)
		}
		h.stale[key] = a
	case err != nil:
		t.Fatal(err)
	default:
		if reported && !retryOf(first, r) {
			t.Fatalf("lease %d: a report %+v that differs from the first %+v answered %+v, not stale", id, r, first, a)
		}
		if first, ok := h.accepted[id]; ok && first != a {
			t.Fatalf("lease %d: first answer %+v, now %+v", id, first, a)
		}
		if !reported {
			h.firsts[id] = r
		}
		h.accepted[id] = a
		h.reports[id] = true
	}
}

func (h *harness) eventsAfter(seq uint64) []event.Event {
	it := h.log.Iter(seq + 1)
	var out []event.Event
	for it.Next() {
		out = append(out, it.Event().Clone())
	}
	if err := it.Close(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// check holds after every step: the invariants of docs/design.md §7 that a single
// process can see.
func (h *harness) check(t *rapid.T) {
	snap, jobs, leases, _ := h.table()

	// 3. fold(log) == live table.
	rebuilt, _, err := replay.Rebuild(h.log, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rebuilt.Snapshot(), snap) {
		t.Fatalf("fold(log) != live table\n--- fold\n%s", rebuilt)
	}

	// The counts the fold keeps agree with the table they count.
	byState := map[fsm.State]int{}
	for _, j := range jobs {
		byState[j.State]++
	}
	if err := h.svc.View(ctx, func(tab *projection.Table) {
		for _, st := range fsm.States() {
			if tab.JobCount(st) != byState[st] {
				t.Fatalf("JobCount(%s) = %d, the table holds %d", st, tab.JobCount(st), byState[st])
			}
		}
	}); err != nil {
		t.Fatal(err)
	}

	// At most one live lease per job, and it is the job's current one.
	live := map[string]uint64{}
	for _, l := range leases {
		if l.Live() {
			if other, dup := live[l.Job]; dup {
				t.Fatalf("job %s has live leases %d and %d", l.Job, other, l.ID)
			}
			live[l.Job] = l.ID
		}
	}
	// 5. Nothing double-counted: attempts are the accepted reports, one at most.
	reported := map[string]int{}
	it := h.log.Query(eventlog.Query{Type: event.TypeReported})
	for it.Next() {
		reported[strings.Clone(it.Event().Job)]++ // the event aliases the iterator: keys must be copies
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.Lease != live[j.ID] {
			t.Fatalf("job %s names live lease %d, the table holds %d", j.ID, j.Lease, live[j.ID])
		}
		if j.Attempts != reported[j.ID] || j.Attempts > 1 {
			t.Fatalf("job %s: %d attempts, %d lease.reported events", j.ID, j.Attempts, reported[j.ID])
		}
		if (j.State == fsm.Reported) != (j.Attempts == 1) {
			t.Fatalf("job %s is %s with %d attempts", j.ID, j.State, j.Attempts)
		}
	}

	// A capped evaluation is queued again after a loss at most its cap
	// times, and fails on the loss after that: lost cap+1 times.
	queued := map[string]int{}
	it = h.log.Query(eventlog.Query{Type: event.TypeQueued})
	for it.Next() {
		queued[strings.Clone(it.Event().Job)]++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		requeues := queued[j.ID] - 1
		if j.MaxRequeues != 0 && requeues > j.MaxRequeues {
			t.Fatalf("job %s queued again %d times, max_requeues %d", j.ID, requeues, j.MaxRequeues)
		}
		if poisoned := j.State == fsm.Failed && j.Kind == event.KindEvaluation; poisoned &&
			(requeues != j.MaxRequeues || j.Leases != requeues+1 || j.Reason != event.LostTimes(j.Leases)) {
			t.Fatalf("evaluation %s failed %q after %d requeues and %d leases, max_requeues %d", j.ID, j.Reason, requeues, j.Leases, j.MaxRequeues)
		}
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("rapid.steps"); f != nil && f.Value.String() == f.DefValue {
		_ = f.Value.Set("150") // long enough runs for leases to expire and reports to go stale
	}
	os.Exit(m.Run())
}

func TestServiceProperties(t *testing.T) {
	seen := map[event.Type]int{}
	rapid.Check(t, func(t *rapid.T) {
		h := newHarness(t)
		defer h.close()
		t.Repeat(h.actions())
		for _, e := range h.eventsAfter(0) {
			seen[e.Type]++
		}
		if err := replayVerify(h.log); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("events: %v", seen)
}

func replayVerify(log *eventlog.Log) error {
	_, err := replay.Verify(log)
	return err
}
