package lease_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/lease"
)

func mustLabels(pairs ...string) event.Labels {
	l, err := event.ParseLabels(pairs)
	if err != nil {
		panic(err)
	}
	return l
}

// TestSubmitScheduleRefused: a submission's scheduling out of bounds is
// refused as invalid, naming the field, and records nothing; a submission
// again of a job must require what it did, whatever time it names.
func TestSubmitScheduleRefused(t *testing.T) {
	f := newFixture(t)
	now := f.clock.Now()
	for _, tc := range []struct {
		name string
		it   lease.SubmitItem
		want string
	}{
		{"priority", lease.SubmitItem{Priority: 1 << 31}, "priority 2147483648"},
		{"not_before", lease.SubmitItem{NotBefore: now.Add(lease.MaxDelay + time.Second)}, "not_before"},
		{"not_before past 2262", lease.SubmitItem{NotBefore: time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC)}, "not_before 2999"},
		{"labels", lease.SubmitItem{Labels: "\x01"}, "labels"},
		{"unknown kind", lease.SubmitItem{Kind: 9}, "kind"},
	} {
		if tc.it.Kind == 0 {
			tc.it.Kind = event.KindEvaluation
		}
		tc.it.ID = "j"
		before := f.log.LastSeq()
		_, _, err := f.svc.SubmitItem(ctx, tc.it)
		if !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || f.log.LastSeq() != before {
			t.Errorf("%s: %v (seq %d after %d), want ErrInvalid naming %q, nothing recorded", tc.name, err, f.log.LastSeq(), before, tc.want)
		}
	}

	gpu := mustLabels("gpu=a100")
	it := lease.SubmitItem{ID: "e", Kind: event.KindEvaluation, Labels: gpu, Priority: 3, NotBefore: now.Add(time.Minute)}
	_, created, err := f.svc.SubmitItem(ctx, it)
	if err != nil || !created {
		t.Fatalf("submit: created %v, %v", created, err)
	}
	again := it
	again.NotBefore = now.Add(time.Hour) // a retry naming another time: the same job
	if j, created, err := f.svc.SubmitItem(ctx, again); err != nil || created || j.NotBefore != now.Add(time.Minute).UnixNano() {
		t.Errorf("the same job with another not_before: %+v, created %v, %v", j, created, err)
	}
	for _, other := range []lease.SubmitItem{
		{ID: "e", Kind: event.KindEvaluation, Labels: gpu, Priority: 2},
		{ID: "e", Kind: event.KindEvaluation, Priority: 3},
	} {
		if _, _, err := f.svc.SubmitItem(ctx, other); !errors.Is(err, lease.ErrJobExists) {
			t.Errorf("job e again with labels {%s}, priority %d: %v, want ErrJobExists", other.Labels, other.Priority, err)
		}
	}
}

// TestAcquireRoutes: a worker is granted only jobs of the kinds it takes
// whose labels it offers, the highest priority first; a job no worker
// present can take says so, and is counted unroutable, until one comes.
func TestAcquireRoutes(t *testing.T) {
	f := newFixture(t)
	gpu, repo := mustLabels("gpu=a100"), mustLabels("repo=piloop")
	for _, it := range []lease.SubmitItem{
		{ID: "eval-gpu", Kind: event.KindEvaluation, Labels: gpu},
		{ID: "run-repo", Kind: event.KindRun, Labels: repo},
		{ID: "eval-low", Kind: event.KindEvaluation, Priority: -1},
		{ID: "eval-high", Kind: event.KindEvaluation, Priority: 5},
	} {
		_, _, err := f.svc.SubmitItem(ctx, it)
		f.must(err)
	}
	unroutable := func() int {
		c, err := f.svc.Counts(ctx)
		f.must(err)
		return c.Unroutable
	}
	if n := unroutable(); n != 4 {
		t.Errorf("%d unroutable with no worker, want 4", n)
	}
	if v, err := f.svc.JobView(ctx, "eval-gpu"); err != nil || v.Takeable || v.WaitingFor != lease.WaitingForWorker {
		t.Errorf("eval-gpu with no worker: takeable %v, waiting for %q (%v)", v.Takeable, v.WaitingFor, err)
	}

	if _, err := f.svc.AcquireWith(ctx, "w", lease.AcquireOptions{Max: 1, Kinds: []event.Kind{9}}); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("an unknown kind: %v, want ErrInvalid", err)
	}
	evals := lease.AcquireOptions{Max: 10, Kinds: []event.Kind{event.KindEvaluation}, Labels: mustLabels("gpu=h100")}
	gs, err := f.svc.AcquireWith(ctx, "cpu", lease.AcquireOptions{Max: 1, Kinds: evals.Kinds})
	f.must(err)
	if len(gs) != 1 || gs[0].Job.ID != "eval-high" {
		t.Fatalf("the evaluation worker got %v, want eval-high", gs)
	}
	if n := unroutable(); n != 2 { // eval-low is an evaluation: cpu takes it
		t.Errorf("%d unroutable with an evaluation worker present, want 2 (eval-gpu, run-repo)", n)
	}
	gs, err = f.svc.AcquireWith(ctx, "h100", evals)
	f.must(err)
	if len(gs) != 1 || gs[0].Job.ID != "eval-low" {
		t.Fatalf("the h100 worker got %v, want eval-low alone", gs)
	}
	gs, err = f.svc.AcquireWith(ctx, "a100", lease.AcquireOptions{Max: 10, Labels: mustLabels("gpu=a100", "repo=piloop")})
	f.must(err)
	if len(gs) != 2 || gs[0].Job.ID != "eval-gpu" || gs[1].Job.ID != "run-repo" {
		t.Fatalf("the a100 worker got %v, want eval-gpu then run-repo", gs)
	}

	// A worker that has not asked for toleration, holding nothing, is not
	// present: what only it could take is unroutable again.
	_, _, err = f.svc.SubmitItem(ctx, lease.SubmitItem{ID: "eval-gpu-2", Kind: event.KindEvaluation, Labels: gpu})
	f.must(err)
	if v, err := f.svc.JobView(ctx, "eval-gpu-2"); err != nil || !v.Takeable || v.WaitingFor != "" {
		t.Errorf("eval-gpu-2 with a100 present: takeable %v, waiting for %q (%v)", v.Takeable, v.WaitingFor, err)
	}
	for _, w := range []string{"cpu", "h100", "a100"} {
		gs, err := f.svc.WorkerLeases(ctx, w)
		f.must(err)
		for _, g := range gs {
			_, err := f.svc.Report(ctx, w, g.Lease, lease.Report{Outcome: event.OutcomeSucceeded})
			f.must(err)
		}
	}
	f.clock.Advance(testConfig.Toleration + time.Second)
	if n := unroutable(); n != 1 {
		t.Errorf("%d unroutable after every worker went, want 1", n)
	}
}

// TestDelayedJobWakesLongPoll: a job is granted no one before its
// not_before, and a long poll waiting for it is granted it once its time
// has come, with no other job queued and no sweep: the poll waits for it.
func TestDelayedJobWakesLongPoll(t *testing.T) {
	f := newFixture(t)
	at := f.clock.Now().Add(20 * time.Millisecond)
	_, _, err := f.svc.SubmitItem(ctx, lease.SubmitItem{ID: "later", Kind: event.KindRun, NotBefore: at, Labels: mustLabels("k=v")})
	f.must(err)
	gs, err := f.svc.Acquire(ctx, "early", 1)
	f.must(err)
	if len(gs) != 0 {
		t.Fatalf("granted %v before its time", gs)
	}
	if v, err := f.svc.JobView(ctx, "later"); err != nil || v.WaitingFor != lease.WaitingForTime {
		t.Errorf("the delayed job waits for %q (%v), want %q", v.WaitingFor, err, lease.WaitingForTime)
	}

	pollCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan []lease.Grant, 1)
	go func() {
		gs, err := f.svc.AcquireWaitWith(pollCtx, "w", lease.AcquireOptions{Max: 1, Labels: mustLabels("k=v")})
		if err != nil {
			t.Error(err)
		}
		got <- gs
	}()
	// The poll has made its first try once its offer makes the job routable.
	for {
		v, err := f.svc.JobView(ctx, "later")
		f.must(err)
		if v.Takeable {
			break
		}
		runtime.Gosched()
	}
	f.clock.Set(at)
	gs = <-got
	if len(gs) != 1 || gs[0].Job.ID != "later" {
		t.Fatalf("the long poll got %v (context: %v), want the delayed job once due", gs, pollCtx.Err())
	}
	if gs[0].Job.State != fsm.Acquired {
		t.Errorf("granted as %s", gs[0].Job.State)
	}
}

// TestSweepWakesForDueJobs: a sweep that finds a job come due wakes the
// acquires waiting, whatever their timers.
func TestSweepWakesForDueJobs(t *testing.T) {
	f := newFixture(t)
	at := f.clock.Now().Add(time.Hour)
	_, _, err := f.svc.SubmitItem(ctx, lease.SubmitItem{ID: "later", Kind: event.KindRun, NotBefore: at})
	f.must(err)
	pollCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan []lease.Grant, 1)
	go func() {
		gs, err := f.svc.AcquireWait(pollCtx, "w", 1)
		if err != nil {
			t.Error(err)
		}
		got <- gs
	}()
	for {
		c, err := f.svc.Counts(ctx)
		f.must(err)
		if c.Unroutable == 0 {
			break
		}
		runtime.Gosched()
	}
	for f.clock.Now().Before(at) { // a second at a time: the daemon is never absent
		f.clock.Advance(time.Second)
		f.must(f.svc.Sweep())
	}
	if gs := <-got; len(gs) != 1 || gs[0].Job.ID != "later" {
		t.Fatalf("the long poll got %v (context: %v), want the job the sweep found due", gs, pollCtx.Err())
	}
}
