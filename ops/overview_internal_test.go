package ops

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
)

// TestPerMinuteIsBounded: the overview's per-minute counts read the newest
// minutes first and stop at their budget, leaving the minutes before
// unknown rather than counted short.
func TestPerMinuteIsBounded(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := clocktest.New(start)
	_, svc := leasetest.Open(t, leasetest.Clock(clock))
	ctx := context.Background()
	report := func(n int) {
		for i := range n {
			id := fmt.Sprintf("j-%d-%d", clock.Now().Unix(), i)
			if _, _, err := svc.Submit(ctx, id, event.KindRun, nil); err != nil {
				t.Fatal(err)
			}
			gs, err := svc.Acquire(ctx, "w1", 1)
			if err != nil || len(gs) != 1 {
				t.Fatalf("acquire %s: %v, %v", id, gs, err)
			}
			if _, err := svc.Report(ctx, "w1", gs[0].Lease, lease.Report{Outcome: event.OutcomeSucceeded}); err != nil {
				t.Fatal(err)
			}
		}
	}
	clock.Advance(58*time.Minute + 10*time.Second)
	report(2) // minute 58
	clock.Advance(time.Minute)
	report(3) // minute 59, the last

	show := func(xs []*int) string {
		out := ""
		for _, x := range xs[55:] {
			if x == nil {
				out += " ?"
			} else {
				out += fmt.Sprintf(" %d", *x)
			}
		}
		return out
	}
	for _, tc := range []struct {
		budget int
		want   string // minutes 55 to 59
	}{
		{100, " 0 0 0 2 3"},
		{5, " 0 0 0 2 3"},
		{4, " ? ? ? ? 3"}, // minute 58's 2 would pass the 1 left
		{3, " ? ? ? ? 3"},
		{2, " ? ? ? ? ?"},
	} {
		got, err := perMinute(svc, event.TypeReported, start, tc.budget)
		if err != nil {
			t.Fatal(err)
		}
		if s := show(got); s != tc.want || len(got) != OverviewMinutes {
			t.Errorf("budget %d: minutes 55 to 59 %q (of %d), want %q", tc.budget, s, len(got), tc.want)
		}
	}
}
