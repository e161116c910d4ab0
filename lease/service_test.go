package lease_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
)

type fixture struct {
	t     *testing.T
	fs    vfs.FS
	clock *clocktest.Clock
	log   *eventlog.Log
	svc   *lease.Service
	opts  []leasetest.Option // for each open, after the fixture's own
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, fs: vfs.NewMem(), clock: clocktest.New(clocktest.Epoch)}
	f.open()
	return f
}

// open opens the service (again, for a restart) on the fixture's store.
func (f *fixture) open() {
	f.t.Helper()
	f.log, f.svc = leasetest.Open(f.t, append([]leasetest.Option{leasetest.FS(f.fs), leasetest.Clock(f.clock)}, f.opts...)...)
}

func (f *fixture) snapshot() []byte {
	var b []byte
	if err := f.svc.View(ctx, func(t *projection.Table) { b = t.Snapshot() }); err != nil {
		f.t.Fatal(err)
	}
	return b
}

func (f *fixture) must(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

// busy puts the service mid-scenario: a running run, an acquired evaluation,
// a queued job, a reported one and a revoke.
func (f *fixture) busy() {
	for _, j := range []struct {
		id   string
		kind event.Kind
	}{{"r1", event.KindRun}, {"e1", event.KindEvaluation}, {"r2", event.KindRun}, {"q1", event.KindRun}} {
		_, _, err := f.svc.Submit(ctx, j.id, j.kind, nil)
		f.must(err)
	}
	gs, err := f.svc.Acquire(ctx, "w1", 3)
	f.must(err)
	_, err = f.svc.Start(ctx, "w1", gs[0].Lease)
	f.must(err)
	_, err = f.svc.Report(ctx, "w1", gs[2].Lease, lease.Report{Outcome: event.OutcomeSucceeded, Ref: "refs/x"})
	f.must(err)
	_, err = f.svc.Kill(ctx, "e1")
	f.must(err)
	f.clock.Advance(time.Second)
	_, err = f.svc.Heartbeat(ctx, "w1", []uint64{gs[0].Lease, gs[1].Lease})
	f.must(err)
}

func TestRestartRebuildsTheSameTable(t *testing.T) {
	for _, graceful := range []bool{false, true} {
		f := newFixture(t)
		f.busy()
		before := f.snapshot()
		if graceful {
			f.must(f.svc.Close()) // writes a snapshot: the restart restores it
		}
		f.must(f.log.Close())
		f.open()
		if graceful && f.svc.Rebuilt().SnapshotSeq == 0 {
			t.Fatal("graceful restart did not restore the snapshot")
		}
		// The reopened service appended daemon.started; the log before it folds
		// to the table from before the restart.
		n := f.log.LastSeq() - 1
		tab := projection.New()
		it := f.log.Query(eventlog.Query{Limit: int(n)})
		for it.Next() {
			f.must(tab.Apply(it.Event()))
		}
		f.must(it.Close())
		if last, err := f.log.Get(n + 1); err != nil || last.Type != event.TypeDaemonStarted {
			t.Fatalf("seq %d after the restart is %v (%v), want daemon.started", n+1, last.String(), err)
		}
		rebuilt := tab.Snapshot()
		if !bytes.Equal(rebuilt, before) {
			t.Fatalf("graceful=%v: table after restart differs:\n%s", graceful, tab)
		}
	}
}

// TestAbsenceExpiresNothing: the clock jumps past grace and toleration
// between two sweeps (a sleep, a SIGSTOP); the next sweep records the absence
// and nobody is judged by it.
func TestAbsenceExpiresNothing(t *testing.T) {
	f := newFixture(t)
	f.busy()
	last := f.log.LastSeq()
	f.clock.Advance(10 * testConfig.Toleration)
	f.must(f.svc.Sweep())
	e, err := f.log.Get(last + 1)
	f.must(err)
	if e.Type != event.TypeDaemonResumed || e.Gap < int64(10*testConfig.Toleration) || f.log.LastSeq() != last+1 {
		t.Fatalf("the sweep after the jump appended %v (last seq %d), want daemon.resumed alone", e.String(), f.log.LastSeq())
	}
	var silentLeases []projection.Lease
	var silentWorkers []projection.Worker
	f.must(f.svc.View(ctx, func(tab *projection.Table) {
		silentLeases, silentWorkers = tab.Silent(f.clock.Now().UnixNano(), int64(testConfig.Grace), int64(testConfig.Toleration))
	}))
	if len(silentLeases) != 0 || len(silentWorkers) != 0 {
		t.Fatalf("after the absence, silent leases %v and workers %v", silentLeases, silentWorkers)
	}
	// Silence after the absence counts again.
	for i := 0; i < 20; i++ {
		f.clock.Advance(testConfig.Toleration / 10)
		f.must(f.svc.Sweep())
	}
	j, err := f.svc.Job(ctx, "r1")
	f.must(err)
	if j.State.String() != "failed" || j.Reason != event.ReasonWorkerLost {
		t.Fatalf("r1 is %s (%q) after 2×toleration of real silence", j.State, j.Reason)
	}
}

// TestFailedServiceRefusesEverything: once the log fails under it, the
// service answers every command, those that would record nothing included,
// with ErrFailed, and never a stale table.
func TestFailedServiceRefusesEverything(t *testing.T) {
	f := newFixture(t)
	f.busy()
	f.must(f.log.Close()) // the store goes away under the service
	if _, _, err := f.svc.Submit(ctx, "new", event.KindRun, nil); !errors.Is(err, lease.ErrFailed) {
		t.Fatalf("submit on a closed log: %v, want ErrFailed", err)
	}
	for name, call := range map[string]func() error{
		"submit again": func() error { _, _, err := f.svc.Submit(ctx, "r1", event.KindRun, nil); return err },
		"acquire":      func() error { _, err := f.svc.Acquire(ctx, "w1", 1); return err },
		"heartbeat":    func() error { _, err := f.svc.Heartbeat(ctx, "w1", nil); return err },
		"start":        func() error { _, err := f.svc.Start(ctx, "w1", 5); return err },
		"report": func() error {
			_, err := f.svc.Report(ctx, "w1", 5, lease.Report{Outcome: event.OutcomeFailed})
			return err
		},
		"cancel": func() error { _, err := f.svc.Cancel(ctx, "q1"); return err },
		"job":    func() error { _, err := f.svc.Job(ctx, "r1"); return err },
		"sweep":  f.svc.Sweep,
		"stop":   func() error { return f.svc.Stop(ctx, lease.CancelQueued) },
	} {
		if err := call(); !errors.Is(err, lease.ErrFailed) {
			t.Errorf("%s: %v, want ErrFailed", name, err)
		}
	}
}

// TestLogFailuresAreTheServices: however a failure of the log reaches a
// caller — a command, a read's wait for durability, a scan of the archive
// outside the service's mutex, a reader's wait for events — it is
// ErrFailed, with the log's own error kept in its chain, so that a caller
// matches lease's sentinels alone and can still ask what failed the log.
func TestLogFailuresAreTheServices(t *testing.T) {
	cause := errors.New("the disk went away")
	ended := projection.JobFilter{State: fsm.Reported} // read from the archive too
	for _, tc := range []struct {
		name   string
		fail   func(f *fixture) // the log fails under the service
		logErr error            // what the log says
		calls  map[string]func(f *fixture) error
	}{
		{"failed", func(f *fixture) { _ = f.log.Fail(cause) }, cause, map[string]func(f *fixture) error{
			"wait for events": func(f *fixture) error { return f.svc.WaitDurable(ctx, f.log.LastSeq()+1) },
			"job":             func(f *fixture) error { _, err := f.svc.Job(ctx, "r1"); return err },
			"submit":          func(f *fixture) error { _, _, err := f.svc.Submit(ctx, "new", event.KindRun, nil); return err },
			"err":             func(f *fixture) error { return f.svc.Err() },
		}},
		{"closed", func(f *fixture) { f.must(f.log.Close()) }, eventlog.ErrClosed, map[string]func(f *fixture) error{
			"jobs ended":   func(f *fixture) error { _, err := f.svc.JobViews(ctx, ended); return err },
			"page of jobs": func(f *fixture) error { _, _, err := f.svc.JobPage(ctx, ended, "", 10); return err },
			"leases ended": func(f *fixture) error {
				_, err := f.svc.Leases(ctx, projection.LeaseFilter{State: fsm.Reported})
				return err
			},
			"page of leases": func(f *fixture) error {
				_, _, err := f.svc.LeasePage(ctx, projection.LeaseFilter{State: fsm.Reported}, 0, 10)
				return err
			},
			"err, once failed": func(f *fixture) error { _, _ = f.svc.JobViews(ctx, ended); return f.svc.Err() },
		}},
	} {
		for name, call := range tc.calls {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				f := newFixture(t)
				f.busy()
				tc.fail(f)
				err := call(f)
				if !errors.Is(err, lease.ErrFailed) || !errors.Is(err, tc.logErr) {
					t.Fatalf("%v: want lease.ErrFailed wrapping %v", err, tc.logErr)
				}
			})
		}
	}
}
