package workload

import (
	"context"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
)

// TestDensity holds 3 workers × 4 leases on an in-process daemon and
// heartbeats them every 50 ms for 200 ms: each worker's calls start at w/3
// of a renew, so 4 calls a worker, every lease answered continue.
func TestDensity(t *testing.T) {
	c, _ := daemon(t)
	d := &Density{Admin: c, Worker: c, Prefix: "dens", Workers: 3, Leases: 4, Renew: 50 * time.Millisecond, Duration: 200 * time.Millisecond, Enqueuers: 2}
	ctx := context.Background()
	held, err := d.Take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for w, ids := range held {
		if len(ids) != 4 {
			t.Fatalf("worker %d holds %d leases, want 4", w, len(ids))
		}
	}
	if err := d.Beat(ctx, held); err != nil {
		t.Fatal(err)
	}
	continued, not, calls := d.Counts()
	if continued != 48 || not != 0 || calls.Count != 12 {
		t.Errorf("%d lease-heartbeats continued, %d not, %d calls; want 48, 0, 12", continued, not, calls.Count)
	}
	if n, err := CountEvents(ctx, c, "lease.expired", 0); err != nil || n != 0 {
		t.Errorf("lease.expired events: %d, %v; want none", n, err)
	}
}

// TestMillion queues 1,200 jobs in batches and checks the acquires and the
// pages it times.
func TestMillion(t *testing.T) {
	c, _ := daemon(t)
	m := &Million{Admin: c, Worker: c, Prefix: "mil", Jobs: 1200, Enqueuers: 2}
	ctx := context.Background()
	if err := SubmitBatches(ctx, c, m.Prefix, 0, m.Jobs, m.Enqueuers); err != nil {
		t.Fatal(err)
	}
	acq, err := m.Acquires(ctx)
	if err != nil || acq.Count != MillionAcquires {
		t.Fatalf("acquires: %+v, %v; want %d", acq, err, MillionAcquires)
	}
	page, err := Pages(ctx, c, api.JobQuery{State: "queued"})
	if err != nil || page.Count != MillionPages {
		t.Fatalf("pages: %+v, %v; want %d", page, err, MillionPages)
	}
	js, err := c.JobsPage(ctx, api.JobQuery{State: "queued", Limit: api.MaxLimit})
	if err != nil || len(js.Jobs) != api.MaxLimit {
		t.Fatalf("queued after the acquires: %d, %v", len(js.Jobs), err)
	}
}
