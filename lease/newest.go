package lease

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/projection"
)

// NewestJobPage returns up to limit of the jobs f selects, newest
// submission first, among those submitted before the event of seq before
// (0: every job), each with its live lease; and the cursor of the next page,
// the seq of the last one's submission (0 on the last page). It walks the
// log's submissions (lease.queued with a kind: a requeue has none) back from
// before, so a page costs the submissions it passes: those of its jobs, and
// of every job newer than the last that f does not select. limit must be
// positive.
func (s *Service) NewestJobPage(ctx context.Context, f projection.JobFilter, before uint64, limit int) ([]JobView, uint64, error) {
	type sub struct {
		seq uint64
		job string
	}
	var (
		vs   []JobView
		last []uint64 // the submission seq of each of vs
	)
	for {
		// A batch of submissions at a time: the log is walked with no
		// lock of the table held, and the jobs are read after.
		var batch []sub
		var gerr error
		err := s.log.Newest(event.TypeQueued, before, func(seq uint64) bool {
			before = seq
			e, err := s.log.Get(seq)
			if err != nil {
				gerr = err
				return false
			}
			if e.Kind != 0 && (f.Kind == 0 || e.Kind == f.Kind) && strings.HasPrefix(e.Job, f.Prefix) {
				batch = append(batch, sub{seq, e.Job})
			}
			return len(batch) < limit+1-len(vs)
		})
		if err == nil {
			err = gerr
		}
		if err != nil {
			return nil, 0, s.logErr(fmt.Errorf("lease: walk the submissions back from seq %d: %w", before, err), "newest jobs")
		}
		for _, b := range batch {
			v, err := s.JobView(ctx, b.job)
			if err != nil {
				return nil, 0, fmt.Errorf("lease: job %q of the submission at seq %d: %w", b.job, b.seq, err)
			}
			if f.Selects(v.Job) {
				vs, last = append(vs, v), append(last, b.seq)
			}
		}
		if len(vs) > limit {
			return vs[:limit], last[limit-1], nil
		}
		if len(batch) == 0 || before <= 1 {
			return vs, 0, nil
		}
	}
}

// Latest returns, newest first, up to n of the durable events of type typ
// that keep selects (nil: all), reading back at most budget of them (0: no
// bound): a bounded read of the newest of a type, as the dashboard's
// overview shows the latest failures and stale reports.
func (s *Service) Latest(typ event.Type, n, budget int, keep func(e *event.Event) bool) ([]event.Event, error) {
	var out []event.Event
	var gerr error
	read := 0
	err := s.log.Newest(typ, 0, func(seq uint64) bool {
		e, err := s.log.Get(seq)
		if err != nil {
			gerr = err
			return false
		}
		if keep == nil || keep(&e) {
			out = append(out, e)
		}
		read++
		return len(out) < n && (budget == 0 || read < budget)
	})
	if err == nil {
		err = gerr
	}
	if err != nil {
		return nil, s.logErr(fmt.Errorf("lease: the latest events of type %s: %w", typ, err), "latest events")
	}
	return out, nil
}

// Now is the service's time now: what it stamps on the events it appends.
func (s *Service) Now() time.Time { return time.Unix(0, s.now()) }

// Queue returns how many jobs are queued and the one at its head, the
// longest queued (since it was queued last), if any.
func (s *Service) Queue(ctx context.Context) (int, projection.Job, bool, error) {
	var head []projection.Job
	depth := 0
	if err := s.read(ctx, func(t *projection.Table) {
		head, depth = t.Queued(1), t.JobCount(fsm.Queued)
	}); err != nil || len(head) == 0 {
		return depth, projection.Job{}, false, err
	}
	return depth, head[0], true, nil
}
