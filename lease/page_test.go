package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
)

// pageWorld submits n jobs in a random order of ids and ends about half of
// them (cancelled: the archive holds them), leasing a few of the rest.
func pageWorld(t testing.TB, svc *lease.Service, n int, rng *rand.Rand) {
	ctx := context.Background()
	for _, i := range rng.Perm(n) {
		kind := event.KindRun
		if i%3 == 0 {
			kind = event.KindEvaluation
		}
		if _, _, err := svc.Submit(ctx, fmt.Sprintf("job-%06d", i), kind, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Acquire(ctx, "w1", min(n/10, lease.MaxAcquire)); err != nil {
		t.Fatal(err)
	}
	queued, err := svc.Jobs(ctx, projection.JobFilter{State: fsm.Queued})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range queued {
		if rng.IntN(2) == 0 {
			if _, err := svc.Cancel(ctx, j.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestJobPageIsTheWholeList: for every filter and page size, the pages of
// JobPage, end to end, are JobViews' whole list, and only the last says
// no more follow.
func TestJobPageIsTheWholeList(t *testing.T) {
	_, svc := leasetest.Open(t)
	pageWorld(t, svc, 300, rand.New(rand.NewPCG(1, 2)))
	ctx := context.Background()
	for _, f := range []projection.JobFilter{{}, {State: fsm.Queued}, {State: fsm.Cancelled}, {Kind: event.KindEvaluation}, {State: fsm.Acquired, Kind: event.KindRun}} {
		whole, err := svc.JobViews(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int{1, 7, 100, len(whole), 1000} {
			var ids []string
			after := ""
			for {
				page, more, err := svc.JobPage(ctx, f, after, max(limit, 1))
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range page {
					ids = append(ids, v.ID)
				}
				if !more {
					break
				}
				after = page[len(page)-1].ID
			}
			if len(ids) != len(whole) {
				t.Fatalf("%+v limit %d: %d jobs paged, %d in the list", f, limit, len(ids), len(whole))
			}
			for i := range ids {
				if ids[i] != whole[i].ID {
					t.Fatalf("%+v limit %d: job %d is %s, the list has %s", f, limit, i, ids[i], whole[i].ID)
				}
			}
		}
	}
}

// BenchmarkJobList compares the first page of jobs with the whole list the
// API answered before it paged, on 40,000 jobs, about half ended (archived).
func BenchmarkJobList(b *testing.B) {
	_, svc := leasetest.Open(b)
	pageWorld(b, svc, 40000, rand.New(rand.NewPCG(1, 2)))
	ctx := context.Background()
	b.Run("page of 100", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := svc.JobPage(ctx, projection.JobFilter{}, "job-020000", 100); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("whole list", func(b *testing.B) {
		for b.Loop() {
			if _, err := svc.JobViews(ctx, projection.JobFilter{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
