package lease_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/replay"
)

const retention = time.Minute

// newCompactFixture is the fixture of a daemon whose heartbeats are kept
// for retention after their job ended.
func newCompactFixture(t *testing.T) *fixture {
	f := &fixture{t: t, fs: vfs.NewMem(), clock: clocktest.New(clocktest.Epoch)}
	f.openRetaining()
	return f
}

func (f *fixture) openRetaining() {
	f.t.Helper()
	f.log, f.svc = leasetest.Open(f.t, leasetest.FS(f.fs), leasetest.Clock(f.clock),
		leasetest.Service(func(o *lease.Options) { o.HeartbeatRetention = retention }))
}

// beats makes worker w heartbeat its leases n times, a renew apart.
func (f *fixture) beats(w string, n int, leases ...uint64) {
	f.t.Helper()
	for range n {
		f.clock.Advance(testConfig.Renew)
		_, err := f.svc.Heartbeat(ctx, w, leases)
		f.must(err)
	}
}

func (f *fixture) acquire(w, job string) uint64 {
	f.t.Helper()
	gs, err := f.svc.AcquireWith(ctx, w, lease.AcquireOptions{Max: 1, Start: true})
	f.must(err)
	if len(gs) != 1 || gs[0].Job.ID != job {
		f.t.Fatalf("%s acquired %v, want %s", w, gs, job)
	}
	return gs[0].Lease
}

// types lists the types of the events of job, in order.
func (f *fixture) types(job string) []string {
	f.t.Helper()
	var out []string
	_, err := f.svc.Events(lease.EventFilter{Job: job}, 0, func(e *event.Event) error {
		s := e.Type.String()
		if e.Beats.Count != 0 {
			s += fmt.Sprintf("×%d", e.Beats.Count)
		}
		out = append(out, s)
		return nil
	})
	f.must(err)
	return out
}

// TestCompactAfterRetention runs jobs to every end — a run reported, an
// evaluation expired, queued again and reported, a run expired, a job
// cancelled while queued — beside a run still live, and compacts: nothing
// before their retention has passed; then the heartbeats of the jobs that
// ended, and only theirs, each lease's into one summary; the live table,
// what the service answers and a rebuild are unchanged, the log verifies,
// and a second pass finds nothing.
func TestCompactAfterRetention(t *testing.T) {
	f := newCompactFixture(t)
	for _, j := range []struct {
		id   string
		kind event.Kind
	}{{"r1", event.KindRun}, {"e1", event.KindEvaluation}, {"r2", event.KindRun}, {"live", event.KindRun}, {"q1", event.KindRun}} {
		_, _, err := f.svc.Submit(ctx, j.id, j.kind, nil)
		f.must(err)
	}
	r1 := f.acquire("w1", "r1")
	e1 := f.acquire("w2", "e1")
	r2 := f.acquire("w3", "r2")
	live := f.acquire("w1", "live")
	f.beats("w1", 5, r1, live)
	_, err := f.svc.Report(ctx, "w1", r1, lease.Report{Outcome: event.OutcomeSucceeded})
	f.must(err)
	f.beats("w2", 3, e1)
	f.beats("w3", 2, r2)
	// w2 and w3 fall silent: e1 goes back to the queue, r2 fails.
	for range 2 * int(testConfig.Toleration/testConfig.Renew) {
		f.clock.Advance(testConfig.Renew)
		_, err := f.svc.Heartbeat(ctx, "w1", []uint64{live})
		f.must(err)
		f.must(f.svc.Sweep())
	}
	_, err = f.svc.Cancel(ctx, "q1")
	f.must(err)
	e1b := f.acquire("w4", "e1")
	f.beats("w4", 4, e1b)
	_, err = f.svc.Report(ctx, "w4", e1b, lease.Report{Outcome: event.OutcomeFailed})
	f.must(err)
	ended := f.clock.Now()

	st, more, err := f.svc.Compact()
	f.must(err)
	if st.Jobs != 0 || more {
		t.Fatalf("compacted %+v (more %v) before the retention passed", st, more)
	}
	before := f.snapshot()
	history := map[string][]string{}
	for _, id := range []string{"r1", "e1", "r2", "q1", "live"} {
		history[id] = f.types(id)
	}
	verified, err := replay.Verify(f.log)
	f.must(err)

	f.clock.Set(ended.Add(retention + time.Second))
	st, more, err = f.svc.Compact()
	f.must(err)
	if st.Jobs != 4 || st.Summaries != 4 || more {
		t.Fatalf("compacted %+v (more %v); want the 4 jobs that ended, a summary for each lease that heartbeat", st, more)
	}
	want := map[string][]string{
		"r1": {"lease.queued", "lease.acquired", "lease.running", "lease.heartbeats×5", "lease.reported"},
		"e1": {"lease.queued", "lease.acquired", "lease.running", "lease.heartbeats×3", "lease.expired", "lease.queued",
			"lease.acquired", "lease.running", "lease.heartbeats×4", "lease.reported"},
		"r2":   {"lease.queued", "lease.acquired", "lease.running", "lease.heartbeats×2", "lease.expired"},
		"q1":   history["q1"],
		"live": history["live"], // its job runs: every heartbeat stays
	}
	for id, w := range want {
		if got := f.types(id); !slices.Equal(got, w) {
			t.Errorf("%s: %v, want %v (before: %v)", id, got, w, history[id])
		}
	}
	if !slices.Equal(f.snapshot(), before) {
		t.Fatal("the live table changed")
	}
	after, err := replay.Verify(f.log)
	f.must(err)
	if after.Events != verified.Events-st.Heartbeats || !slices.Equal(after.Table.Snapshot(), verified.Table.Snapshot()) {
		t.Fatalf("the compacted log folds %d events to\n%s\nthe log before, %d to\n%s", after.Events, after.Table, verified.Events, verified.Table)
	}
	again, _, err := f.svc.Compact()
	f.must(err)
	if again.Jobs != 0 || again.Cursor != st.Cursor {
		t.Fatalf("a second pass compacted %+v; want nothing, cursor %d", again, st.Cursor)
	}
	f.must(f.log.Close())
	f.openRetaining()
	if c, err := f.log.Compacted(); err != nil || c != st.Cursor {
		t.Fatalf("cursor after a restart %d (%v), want %d", c, err, st.Cursor)
	}
}

// TestCompactBatch: a pass compacts CompactBatch jobs at most, says there is
// more, and the next pass goes on from its cursor.
func TestCompactBatch(t *testing.T) {
	f := newCompactFixture(t)
	n := lease.CompactBatch + 3
	for i := range n {
		id := fmt.Sprint("j", i)
		_, _, err := f.svc.Submit(ctx, id, event.KindRun, nil)
		f.must(err)
		l := f.acquire("w", id)
		f.beats("w", 2, l)
		_, err = f.svc.Report(ctx, "w", l, lease.Report{Outcome: event.OutcomeSucceeded})
		f.must(err)
	}
	f.clock.Advance(retention + time.Second)
	st, more, err := f.svc.Compact()
	f.must(err)
	if st.Jobs != lease.CompactBatch || !more {
		t.Fatalf("first pass %+v, more %v; want %d jobs and more", st, more, lease.CompactBatch)
	}
	st2, more, err := f.svc.Compact()
	f.must(err)
	if st2.Jobs != 3 || more || st2.Cursor <= st.Cursor {
		t.Fatalf("second pass %+v, more %v; want the 3 jobs left after cursor %d", st2, more, st.Cursor)
	}
	if tot := f.svc.CompactionTotals(); tot.Jobs != n || tot.Heartbeats != n {
		t.Fatalf("totals %+v; want %d jobs, %d heartbeats removed (one of two each)", tot, n, n)
	}
	_, err = replay.Verify(f.log)
	f.must(err)
}

// TestRunCompaction: the loop compacts at once, then at each tick, and
// returns when its context ends.
func TestRunCompaction(t *testing.T) {
	f := newCompactFixture(t)
	job := func(id string) {
		_, _, err := f.svc.Submit(ctx, id, event.KindRun, nil)
		f.must(err)
		l := f.acquire("w", id)
		f.beats("w", 3, l)
		_, err = f.svc.Report(ctx, "w", l, lease.Report{Outcome: event.OutcomeSucceeded})
		f.must(err)
	}
	job("a")
	f.clock.Advance(retention + time.Second)
	runCtx, cancel := context.WithCancel(ctx)
	tick := make(chan time.Time)
	done := make(chan error, 1)
	go func() { done <- f.svc.RunCompaction(runCtx, tick) }()
	waitFor := func(jobs int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for f.svc.CompactionTotals().Jobs < jobs {
			if time.Now().After(deadline) {
				t.Fatalf("compacted %+v; want %d jobs", f.svc.CompactionTotals(), jobs)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor(1)
	job("b")
	f.clock.Advance(retention + time.Second)
	tick <- time.Now()
	waitFor(2)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := f.types("b"); !slices.Contains(got, event.TypeHeartbeats.String()+"×3") {
		t.Fatalf("b: %v", got)
	}
}

// TestNoRetentionKeepsAll: with no retention the compactor does nothing.
func TestNoRetentionKeepsAll(t *testing.T) {
	f := newFixture(t)
	_, _, err := f.svc.Submit(ctx, "r1", event.KindRun, nil)
	f.must(err)
	l := f.acquire("w", "r1")
	f.beats("w", 3, l)
	_, err = f.svc.Report(ctx, "w", l, lease.Report{Outcome: event.OutcomeSucceeded})
	f.must(err)
	f.clock.Advance(1000 * time.Hour)
	st, more, err := f.svc.Compact()
	f.must(err)
	if st != (lease.CompactStats{}) || more {
		t.Fatalf("compacted %+v with no retention", st)
	}
	if got := f.types("r1"); !slices.Equal(got, []string{"lease.queued", "lease.acquired", "lease.running",
		"lease.heartbeat", "lease.heartbeat", "lease.heartbeat", "lease.reported"}) {
		t.Fatalf("r1: %v", got)
	}
	if c, err := f.log.Compacted(); c != 0 || err != nil {
		t.Fatalf("cursor %d, %v", c, err)
	}
}

// TestCompactKeepsLiveJobs: an evaluation whose lease expired goes back to
// the queue: its job has not ended, and the expired lease's heartbeats stay
// however long ago it expired.
func TestCompactKeepsLiveJobs(t *testing.T) {
	f := newCompactFixture(t)
	_, _, err := f.svc.Submit(ctx, "e1", event.KindEvaluation, nil)
	f.must(err)
	l := f.acquire("w", "e1")
	f.beats("w", 3, l)
	for range 2 * int(testConfig.Toleration/testConfig.Renew) {
		f.clock.Advance(testConfig.Renew)
		f.must(f.svc.Sweep())
	}
	before := f.types("e1")
	if !slices.Contains(before, "lease.expired") || before[len(before)-1] != "lease.queued" {
		t.Fatalf("e1: %v; want its lease expired and the job queued again", before)
	}
	f.clock.Advance(10 * retention)
	st, _, err := f.svc.Compact()
	f.must(err)
	if got := f.types("e1"); st.Jobs != 0 || !slices.Equal(got, before) {
		t.Fatalf("compacted %+v: e1 %v, want %v", st, got, before)
	}
}
