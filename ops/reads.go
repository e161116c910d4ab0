package ops

import (
	"context"
	"fmt"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
)

// The reads the API serves, each a page of the service's answer converted
// (paging.go has the cursors). Their filters come parsed: the query of a
// request is its transport's.

// Job is job id with its live lease, if it has one.
func Job(ctx context.Context, svc *lease.Service, id string) (api.Job, error) {
	if err := lease.CheckID("job", id); err != nil {
		return api.Job{}, err
	}
	v, err := svc.JobView(ctx, id)
	if err != nil {
		return api.Job{}, err
	}
	return ViewOf(v), nil
}

// JobWithLease converts j, as a command that changed it returned it (a
// submit, a cancel, a kill), with its live lease if it has one.
func JobWithLease(ctx context.Context, svc *lease.Service, j projection.Job) (api.Job, error) {
	if j.Lease == 0 {
		return JobOf(j, nil), nil
	}
	l, err := svc.Lease(ctx, j.Lease)
	if err != nil {
		return api.Job{}, fmt.Errorf("ops: live lease %d of job %q: %w", j.Lease, j.ID, err)
	}
	return JobOf(j, &l), nil
}

// Jobs is a page of the jobs f selects, by id, after the job of that id.
func Jobs(ctx context.Context, svc *lease.Service, f projection.JobFilter, after string, limit int) (api.Jobs, error) {
	vs, more, err := svc.JobPage(ctx, f, after, limit)
	if err != nil {
		return api.Jobs{}, err
	}
	out := api.Jobs{Jobs: make([]api.Job, 0, len(vs))}
	for _, v := range vs {
		out.Jobs = append(out.Jobs, ViewOf(v))
	}
	if more {
		out.Next = JobCursor(vs[len(vs)-1].ID)
	}
	return out, nil
}

// NewestJobs is a page of the jobs f selects, newest submission first,
// submitted before the event of seq before (0: every job).
func NewestJobs(ctx context.Context, svc *lease.Service, f projection.JobFilter, before uint64, limit int) (api.Jobs, error) {
	vs, next, err := svc.NewestJobPage(ctx, f, before, limit)
	if err != nil {
		return api.Jobs{}, err
	}
	out := api.Jobs{Jobs: make([]api.Job, 0, len(vs))}
	for _, v := range vs {
		out.Jobs = append(out.Jobs, JobOf(v.Job, v.Live))
	}
	if next != 0 {
		out.Next = NumCursor(next)
	}
	return out, nil
}

// History is a page of job's events, by seq, after seq after, from the
// log's job index.
func History(ctx context.Context, svc *lease.Service, job string, after uint64, limit int) (api.History, error) {
	if err := lease.CheckID("job", job); err != nil {
		return api.History{}, err
	}
	// The job lookup waits until what the table knows of it is durable, so
	// the log, which shows durable events only, has all of it.
	if _, err := svc.Job(ctx, job); err != nil {
		return api.History{}, err
	}
	evs, more, err := eventPage(svc, lease.EventFilter{Job: job, After: after}, limit)
	if err != nil {
		return api.History{}, err
	}
	out := api.History{Events: evs}
	if more {
		out.Next = NumCursor(evs[len(evs)-1].Seq)
	}
	return out, nil
}

// Events is a page of the events f selects, from the log's indexes, and
// the seq of the page's last event as the cursor of the next (0 on the
// last page).
func Events(svc *lease.Service, f lease.EventFilter, limit int) (api.Events, error) {
	evs, more, err := eventPage(svc, f, limit)
	if err != nil {
		return api.Events{}, err
	}
	out := api.Events{Events: evs}
	if more {
		out.Next = evs[len(evs)-1].Seq
	}
	return out, nil
}

// eventPage reads up to limit of the events f selects and converts them,
// reporting whether more follow (it reads one more to know). Only durable
// events are ever seen.
func eventPage(svc *lease.Service, f lease.EventFilter, limit int) ([]api.Event, bool, error) {
	out := []api.Event{}
	_, err := svc.Events(f, limit+1, func(e *event.Event) error {
		out = append(out, EventOf(e)) // e aliases the log's buffers: converted (copied) here
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("ops: query events: %w", err)
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

// Leases is a page of the leases f selects (the live ones when it names no
// state), by token, after token after.
func Leases(ctx context.Context, svc *lease.Service, f projection.LeaseFilter, after uint64, limit int) (api.Leases, error) {
	ls, more, err := svc.LeasePage(ctx, f, after, limit)
	if err != nil {
		return api.Leases{}, err
	}
	out := api.Leases{Leases: make([]api.Lease, 0, len(ls))}
	for _, l := range ls {
		out.Leases = append(out.Leases, LeaseOf(l))
	}
	if more {
		out.Next = NumCursor(ls[len(ls)-1].ID)
	}
	return out, nil
}

// WorkerLeases is a page of the live leases the daemon holds for worker,
// by token, after token after, with their jobs and the daemon's timing:
// what a worker re-attaches to after a restart.
func WorkerLeases(ctx context.Context, svc *lease.Service, worker string, after uint64, limit int) (api.Grants, error) {
	if err := lease.CheckID("worker", worker); err != nil {
		return api.Grants{}, err
	}
	vs, more, err := svc.WorkerPage(ctx, worker, after, limit)
	if err != nil {
		return api.Grants{}, err
	}
	out := api.Grants{Leases: make([]api.Grant, 0, len(vs))}
	timing := TimingOf(svc.Config())
	for _, v := range vs {
		out.Leases = append(out.Leases, api.Grant{Lease: v.Live.ID, Job: JobOf(v.Job, v.Live), Timing: timing})
	}
	if more {
		out.Next = NumCursor(vs[len(vs)-1].Live.ID)
	}
	return out, nil
}

// Workers is a page of the workers the table knows, by id, after the
// worker of that id, with the daemon's timing, by which a reader tells how
// long a worker, or a lease, has before grace and toleration.
func Workers(ctx context.Context, svc *lease.Service, after string, limit int) (api.Workers, error) {
	ws, err := svc.Workers(ctx)
	if err != nil {
		return api.Workers{}, err
	}
	out := api.Workers{Workers: []api.Worker{}, Timing: TimingOf(svc.Config())}
	for _, w := range ws { // by id
		if w.ID <= after {
			continue
		}
		if len(out.Workers) == limit {
			out.Next = JobCursor(out.Workers[limit-1].ID) // a worker id is a valid job id
			break
		}
		out.Workers = append(out.Workers, WorkerOf(w))
	}
	return out, nil
}
