package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
)

// The overview's bounds: what one GET /v1/overview reads of the log at most,
// so that its cost does not grow with the rate of jobs or the history.
const (
	// OverviewMinutes is the span of the overview's counts, a minute each.
	OverviewMinutes = 60
	// OverviewBudget bounds the events each per-minute series reads: a
	// busier hour has its older minutes unknown (null).
	OverviewBudget = 20000
	// OverviewLatest is how many failures and stale reports it lists.
	OverviewLatest = 8
	// latestBudget bounds the reports read back to find the latest failures
	// among them.
	latestBudget = 2000
)

// Overview is the daemon at a glance: the table's counts, the queue's
// head, the last hour's reports and expiries a minute at a time (from the
// log's type index, narrowed by its time index), and the latest failures
// (reports of failed or killed, expiries, evaluations failed at their cap)
// and stale reports.
func Overview(ctx context.Context, svc *lease.Service) (api.Overview, error) {
	n, err := svc.Counts(ctx)
	if err != nil {
		return api.Overview{}, err
	}
	now := svc.Now()
	out := api.Overview{Time: now.UTC(), Seq: n.Seq, Jobs: map[string]int{}, Reported: map[string]uint64{},
		Workers: api.WorkerCounts{Reachable: n.Reachable, Unreachable: n.Unreachable}}
	for st, c := range n.Jobs {
		out.Jobs[st.String()] = c
	}
	for o, c := range n.Reported {
		out.Reported[o.String()] = c
	}
	depth, head, ok, err := svc.Queue(ctx)
	if err != nil {
		return api.Overview{}, err
	}
	out.Queue.Depth = depth
	if ok {
		t := unixTime(head.Updated)
		out.Queue.Oldest, out.Queue.Job = &t, head.ID
	}
	end := now.Truncate(time.Minute).Add(time.Minute) // the minute under way is the last
	out.Minutes.Start = end.Add(-OverviewMinutes * time.Minute).UTC()
	if out.Minutes.Reported, err = perMinute(svc, event.TypeReported, out.Minutes.Start, OverviewBudget); err != nil {
		return api.Overview{}, err
	}
	if out.Minutes.Expired, err = perMinute(svc, event.TypeExpired, out.Minutes.Start, OverviewBudget); err != nil {
		return api.Overview{}, err
	}
	failed := func(e *event.Event) bool { return e.Outcome == event.OutcomeFailed || e.Outcome == event.OutcomeKilled }
	reports, err := svc.Latest(event.TypeReported, OverviewLatest, latestBudget, failed)
	if err != nil {
		return api.Overview{}, err
	}
	expired, err := svc.Latest(event.TypeExpired, OverviewLatest, 0, nil)
	if err != nil {
		return api.Overview{}, err
	}
	capped, err := svc.Latest(event.TypeFailed, OverviewLatest, 0, nil)
	if err != nil {
		return api.Overview{}, err
	}
	out.Failures = newestOf(OverviewLatest, reports, expired, capped)
	stale, err := svc.Latest(event.TypeStaleReport, OverviewLatest, 0, nil)
	if err != nil {
		return api.Overview{}, err
	}
	out.Stale = newestOf(OverviewLatest, stale)
	return out, nil
}

// perMinute counts the events of type typ in each minute from start on,
// the newest minute first, until budget events are read: the minute that
// would pass it, and those before, are left unknown (nil).
func perMinute(svc *lease.Service, typ event.Type, start time.Time, budget int) ([]*int, error) {
	out := make([]*int, OverviewMinutes)
	for i := OverviewMinutes - 1; i >= 0; i-- {
		from := start.Add(time.Duration(i) * time.Minute)
		n := 0
		f := lease.EventFilter{Type: typ, Since: from.UnixNano(), Until: from.Add(time.Minute).UnixNano()}
		if _, err := svc.Events(f, budget+1, func(*event.Event) error { n++; return nil }); err != nil {
			return nil, fmt.Errorf("ops: count %s from %s: %w", typ, from.Format(time.RFC3339), err)
		}
		if n > budget {
			break // this minute not whole: unknown, as the ones before
		}
		budget -= n
		out[i] = &n
	}
	return out, nil
}

// newestOf merges lists of events, each newest first, into the n newest.
func newestOf(n int, lists ...[]event.Event) []api.Event {
	out := []api.Event{}
	for len(out) < n {
		best := -1
		for i, l := range lists {
			if len(l) > 0 && (best < 0 || l[0].Seq > lists[best][0].Seq) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		out = append(out, EventOf(&lists[best][0]))
		lists[best] = lists[best][1:]
	}
	return out
}
