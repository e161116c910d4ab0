package lease_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
)

// seqs reads the seqs of the events f selects, up to limit.
func seqs(t *testing.T, svc *lease.Service, f lease.EventFilter, limit int) ([]uint64, uint64) {
	t.Helper()
	var out []uint64
	upper, err := svc.Events(f, limit, func(e *event.Event) error {
		out = append(out, e.Seq)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, upper
}

func TestEvents(t *testing.T) {
	f := newFixture(t)
	f.busy()
	last, err := f.svc.Seq(ctx)
	f.must(err)

	all, upper := seqs(t, f.svc, lease.EventFilter{}, 0)
	if upper != last || len(all) != int(last) || all[0] != 1 || all[len(all)-1] != last {
		t.Fatalf("every event: %v up to %d, want 1..%d", all, upper, last)
	}
	if page, _ := seqs(t, f.svc, lease.EventFilter{After: 2}, 3); !slices.Equal(page, []uint64{3, 4, 5}) {
		t.Fatalf("after 2, limit 3: %v", page)
	}
	r1, _ := seqs(t, f.svc, lease.EventFilter{Job: "r1"}, 0)
	queued, _ := seqs(t, f.svc, lease.EventFilter{Type: event.TypeQueued}, 0)
	if len(r1) != 4 || len(queued) != 4 { // r1: queued, acquired, running, heartbeat
		t.Fatalf("job r1: %v; queued: %v", r1, queued)
	}
	// A cursor at or past the last event reads nothing, up to 2^64−1.
	for _, after := range []uint64{last, last + 1, math.MaxUint64} {
		if got, upper := seqs(t, f.svc, lease.EventFilter{After: after}, 0); len(got) != 0 || upper != last {
			t.Fatalf("after %d: %v up to %d", after, got, upper)
		}
	}
	// fn's error ends the read and comes back as it is.
	stop := errors.New("stop")
	n := 0
	if _, err := f.svc.Events(lease.EventFilter{}, 0, func(*event.Event) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("fn's error: %v after %d events", err, n)
	}
}

func TestWorkerAndGrantViews(t *testing.T) {
	f := newFixture(t)
	for _, id := range []string{"a", "b"} {
		_, _, err := f.svc.Submit(ctx, id, event.KindRun, nil)
		f.must(err)
	}
	gs, err := f.svc.Acquire(ctx, "w1", 2)
	f.must(err)
	vs, err := f.svc.GrantViews(ctx, gs)
	f.must(err)
	ws, err := f.svc.WorkerViews(ctx, "w1")
	f.must(err)
	if len(vs) != 2 || len(ws) != 2 {
		t.Fatalf("grant views %d, worker views %d, want 2 each", len(vs), len(ws))
	}
	for i, g := range gs {
		if vs[i].Job.ID != g.Job.ID || vs[i].Live == nil || vs[i].Live.ID != g.Lease || ws[i].Live.ID != g.Lease {
			t.Fatalf("grant %d (lease %d of %q): grant view %+v, worker view %+v", i, g.Lease, g.Job.ID, vs[i], ws[i])
		}
	}
	if ws, err := f.svc.WorkerViews(ctx, "w2"); err != nil || len(ws) != 0 {
		t.Fatalf("another worker's views: %v, %v", ws, err)
	}
	if _, err := f.svc.WorkerViews(ctx, ""); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("no worker id: %v, want ErrInvalid", err)
	}
}

func TestCounts(t *testing.T) {
	f := newFixture(t)
	f.busy()
	c, err := f.svc.Counts(ctx)
	f.must(err)
	seq, err := f.svc.Seq(ctx)
	f.must(err)
	// busy: r1 running, e1 acquired (revoked), r2 reported, q1 queued; w1.
	if c.Seq != seq || c.Reachable != 1 || c.Unreachable != 0 ||
		c.Leases[fsm.Acquired] != 1 || c.Leases[fsm.Running] != 1 || len(c.Leases) != 2 ||
		c.Jobs[fsm.Queued] != 1 || c.Events[event.TypeQueued] != 4 || c.Events[event.TypeDaemonStarted] != 1 {
		t.Fatalf("counts %+v", c)
	}
}

// SnapshotEvery 0 (or negative) writes no snapshot by count, as
// store.snapshot_every = 0 in the config; a positive count does.
func TestSnapshotEvery(t *testing.T) {
	for _, every := range []int{0, -1, 2} {
		log, svc := leasetest.Open(t, leasetest.Service(func(o *lease.Options) { o.SnapshotEvery = every }))
		for _, id := range []string{"a", "b", "c"} {
			if _, _, err := svc.Submit(ctx, id, event.KindRun, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := svc.Sweep(); err != nil {
			t.Fatal(err)
		}
		snaps, err := log.Snapshots()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(snaps) > 0, every > 0; got != want {
			t.Errorf("SnapshotEvery %d: snapshots %v after 4 events and a sweep", every, snaps)
		}
	}
}
