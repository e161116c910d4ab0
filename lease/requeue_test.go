package lease_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
)

func maxRequeues(n int) *int { return &n }

// defaultCap opens the fixture's service with a default cap on requeues.
func defaultCap(n int) leasetest.Option {
	return leasetest.Service(func(o *lease.Options) { o.MaxRequeues = n })
}

// TestSubmitMaxRequeues: an evaluation submitted without a cap gets the
// daemon's default, recorded in its lease.queued, so that a restart with
// another default changes no job submitted before; a cap given is kept, 0
// included; a bad one is refused naming it, recording nothing. The same
// job again is the same job whatever its cap if the submission names none,
// and refused if it names another.
func TestSubmitMaxRequeues(t *testing.T) {
	f := newFixture(t)
	f.opts = []leasetest.Option{defaultCap(2)}
	f.restart()
	submit := func(id string, kind event.Kind, cap *int) (projection.Job, bool, error) {
		return f.svc.SubmitItem(ctx, lease.SubmitItem{ID: id, Kind: kind, MaxRequeues: cap})
	}
	for _, tc := range []struct {
		id   string
		kind event.Kind
		cap  *int
		want int
	}{
		{"e-default", event.KindEvaluation, nil, 2},
		{"e-none", event.KindEvaluation, maxRequeues(0), 0},
		{"e-five", event.KindEvaluation, maxRequeues(5), 5},
		{"r-default", event.KindRun, nil, 0}, // a run is never queued again
		{"r-none", event.KindRun, maxRequeues(0), 0},
	} {
		j, created, err := submit(tc.id, tc.kind, tc.cap)
		if err != nil || !created || j.MaxRequeues != tc.want {
			t.Errorf("%s: %+v created=%v %v, want max_requeues %d", tc.id, j, created, err, tc.want)
		}
	}
	before := f.log.LastSeq()
	for _, tc := range []struct {
		id   string
		kind event.Kind
		cap  int
		want string
	}{
		{"bad-1", event.KindEvaluation, -1, "max_requeues -1: want 0 (no cap) to 1000000"},
		{"bad-2", event.KindEvaluation, lease.MaxRequeuesLimit + 1, "max_requeues 1000001: want 0 (no cap) to 1000000"},
		{"bad-3", event.KindRun, 1, "max_requeues 1 on a run: a run is never queued again"},
	} {
		if _, _, err := submit(tc.id, tc.kind, maxRequeues(tc.cap)); !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", tc.id, err, tc.want)
		}
	}
	if _, _, err := submit("e-default", event.KindEvaluation, maxRequeues(5)); !errors.Is(err, lease.ErrJobExists) || !strings.Contains(err.Error(), "exists with max_requeues 2") {
		t.Errorf("the same job with another cap: %v, want ErrJobExists naming its cap", err)
	}
	if f.log.LastSeq() != before {
		t.Fatalf("refused submissions recorded %d events", f.log.LastSeq()-before)
	}
	// A restart with another default: the jobs keep the cap they were
	// submitted with, and the same submission without a cap is the same job.
	f.opts = []leasetest.Option{defaultCap(7)}
	f.restart()
	for id, want := range map[string]int{"e-default": 2, "e-five": 5, "e-none": 0} {
		j, created, err := submit(id, event.KindEvaluation, nil)
		if err != nil || created || j.MaxRequeues != want {
			t.Errorf("%s again after the restart: %+v created=%v %v, want the same job, max_requeues %d", id, j, created, err, want)
		}
	}
	if j, _, err := submit("e-later", event.KindEvaluation, nil); err != nil || j.MaxRequeues != 7 {
		t.Errorf("a job submitted after the restart: %+v %v, want the new default 7", j, err)
	}
	// A batch: an item that names another cap than the job's (an item
	// before it in the batch) is refused on its own.
	res, err := f.svc.SubmitBatch(ctx, []lease.SubmitItem{
		{ID: "b1", Kind: event.KindEvaluation, MaxRequeues: maxRequeues(1)},
		{ID: "b1", Kind: event.KindEvaluation, MaxRequeues: maxRequeues(3)},
		{ID: "b1", Kind: event.KindEvaluation},
	})
	f.must(err)
	if res[0].Err != nil || !res[0].Created || !errors.Is(res[1].Err, lease.ErrJobExists) || res[2].Err != nil || res[2].MaxRequeues != 1 {
		t.Errorf("batch: %+v", res)
	}
	f.must(f.log.Close())
	if _, _, err := leasetest.OpenErr(leasetest.FS(f.fs), leasetest.Clock(f.clock), defaultCap(-1)); err == nil || !strings.Contains(err.Error(), "Options.MaxRequeues -1") {
		t.Errorf("a service with a default cap of -1: %v", err)
	}
}

// restart closes the store as a crash would and opens the service again.
func (f *fixture) restart() {
	f.t.Helper()
	f.must(f.log.Close())
	f.open()
}

// TestPoisonEvaluationFails: an evaluation whose worker is lost every time
// is queued again as often as its cap allows — across a restart, by a
// lost report or by an expiry alike — and, lost once more, ends failed
// with "lost N times": lease.failed instead of lease.queued, no attempt.
// Without a cap, or revoked, it goes on as before.
func TestPoisonEvaluationFails(t *testing.T) {
	f := newFixture(t)
	_, _, err := f.svc.SubmitItem(ctx, lease.SubmitItem{ID: "poison", Kind: event.KindEvaluation, MaxRequeues: maxRequeues(2)})
	f.must(err)
	_, _, err = f.svc.Submit(ctx, "uncapped", event.KindEvaluation, nil)
	f.must(err)
	lose := func(id string, byExpiry bool) []string {
		t.Helper()
		gs, err := f.svc.Acquire(ctx, "w1", 1)
		f.must(err)
		if len(gs) != 1 || gs[0].Job.ID != id {
			t.Fatalf("acquired %+v, want %s", gs, id)
		}
		before := f.log.LastSeq()
		if byExpiry {
			for range int(leasetest.Timing().Toleration.Seconds()) + 2 {
				f.clock.Advance(1e9)
				f.must(f.svc.Sweep())
			}
			_, err = f.svc.Heartbeat(ctx, "w1", nil) // reachable again, for the next acquire
			f.must(err)
		} else {
			_, err = f.svc.Report(ctx, "w1", gs[0].Lease, lease.Report{Outcome: event.OutcomeLost, Reason: "agent vanished"})
			f.must(err)
		}
		var types []string
		for _, e := range eventsAfter(t, f.log, before) {
			if e.Job == id {
				types = append(types, e.Type.String()+" "+e.Reason)
			}
		}
		return types
	}
	// A lost evaluation keeps its place, its first queueing: the poison job,
	// queued first, is taken again after each loss, until it fails.
	wantTypes(t, "the first loss", lose("poison", false), "lease.lost agent vanished", "lease.queued worker lost")
	f.restart() // keeps the count: it is the fold's
	wantTypes(t, "the second loss", lose("poison", true), "lease.expired lease expired", "lease.queued lease expired")
	wantTypes(t, "the last loss", lose("poison", false), "lease.lost agent vanished", "lease.failed lost 3 times")
	j, err := f.svc.Job(ctx, "poison")
	f.must(err)
	if j.State != fsm.Failed || j.Reason != "lost 3 times" || j.Attempts != 0 || j.Leases != 3 || j.MaxRequeues != 2 {
		t.Fatalf("the poison job: %+v, want failed, \"lost 3 times\", no attempt, 3 leases, max_requeues 2", j)
	}
	wantTypes(t, "the uncapped job's loss", lose("uncapped", false), "lease.lost agent vanished", "lease.queued worker lost")
	lose("uncapped", true)
	for range 2 {
		lose("uncapped", false)
	}
	if j, _ := f.svc.Job(ctx, "uncapped"); j.State != fsm.Queued || j.Leases != 4 {
		t.Fatalf("the uncapped job after four losses: %+v, want queued again", j)
	}
	f.must(f.svc.Close()) // a snapshot: the restart restores the counts from it
	f.restart()
	c, err := f.svc.Counts(ctx)
	f.must(err)
	if c.Events[event.TypeFailed] != 1 || c.Jobs[fsm.Failed] != 1 {
		t.Errorf("counts after a restart: %d lease.failed, %d jobs failed; want 1 and 1", c.Events[event.TypeFailed], c.Jobs[fsm.Failed])
	}
}

// TestStopKeepsTheQueue: a stop that keeps the queue cancels nothing and
// says so in daemon.stopping; the next start finds the jobs queued, in
// their order, for the first worker that asks. The default still cancels.
func TestStopKeepsTheQueue(t *testing.T) {
	f := newFixture(t)
	f.submit("q1", "q2", "q3")
	before := f.log.LastSeq()
	f.must(f.svc.Stop(ctx, lease.KeepQueued))
	evs := eventsAfter(t, f.log, before)
	if len(evs) != 1 || evs[0].Type != event.TypeDaemonStopping || evs[0].Reason != event.ReasonQueueKept {
		t.Fatalf("a stop that keeps the queue recorded %v, want daemon.stopping %q alone", evs, event.ReasonQueueKept)
	}
	if _, _, err := f.svc.Submit(ctx, "late", event.KindRun, nil); !errors.Is(err, lease.ErrStopping) {
		t.Fatalf("a submission while stopping: %v, want ErrStopping", err)
	}
	f.must(f.svc.Close())
	f.restart()
	gs, err := f.svc.Acquire(ctx, "w1", 2)
	f.must(err)
	if len(gs) != 2 || gs[0].Job.ID != "q1" || gs[1].Job.ID != "q2" {
		t.Fatalf("after the restart w1 acquired %+v, want q1 and q2, in their order", gs)
	}
	before = f.log.LastSeq()
	f.must(f.svc.Stop(ctx, lease.CancelQueued))
	wantTypes(t, "the default stop", f.typesAfter(before), "lease.cancelled q3", "daemon.stopping")
}

// TestJobPageByOutcome: the jobs reported with an outcome, a page at a
// time, from the archive, with no job listed twice or skipped; the live
// table has none.
func TestJobPageByOutcome(t *testing.T) {
	f := newFixture(t)
	outcomes := map[string]event.Outcome{"a": event.OutcomeFailed, "b": event.OutcomeSucceeded, "c": event.OutcomeFailed,
		"d": event.OutcomeKilled, "e": event.OutcomeFailed}
	for _, id := range []string{"a", "b", "c", "d", "e", "q"} {
		f.submit(id)
	}
	for range len(outcomes) {
		gs, err := f.svc.Acquire(ctx, "w1", 1)
		f.must(err)
		_, err = f.svc.Report(ctx, "w1", gs[0].Lease, lease.Report{Outcome: outcomes[gs[0].Job.ID]})
		f.must(err)
	}
	var got []string
	after := ""
	for page := 0; ; page++ {
		vs, more, err := f.svc.JobPage(ctx, projection.JobFilter{Outcome: event.OutcomeFailed}, after, 2)
		f.must(err)
		for _, v := range vs {
			got = append(got, v.ID)
		}
		if !more {
			break
		}
		after = vs[len(vs)-1].ID
	}
	if strings.Join(got, " ") != "a c e" {
		t.Errorf("jobs reported failed, by pages of 2: %q, want a c e", got)
	}
	c, err := f.svc.Counts(ctx)
	f.must(err)
	if c.Reported[event.OutcomeFailed] != 3 || c.Reported[event.OutcomeSucceeded] != 1 || c.Reported[event.OutcomeKilled] != 1 || c.Reported[event.OutcomeCancelled] != 0 {
		t.Errorf("reports by outcome: %v", c.Reported)
	}
}
