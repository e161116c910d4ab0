package lease

import (
	"context"
	"fmt"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/projection"
)

// The reads the API needs beyond jobs and leases (archive.go): what a worker
// holds, the log's events, and the table's counts. Each either waits until
// what it read is durable (the table's, through read) or reads only what is
// durable already (the log's), so that no answer can be undone by a crash.

// WorkerLeases returns the live leases worker holds, with their jobs: what a
// worker re-attaches to after a restart.
func (s *Service) WorkerLeases(ctx context.Context, worker string) ([]Grant, error) {
	vs, err := s.WorkerViews(ctx, worker)
	if err != nil {
		return nil, err
	}
	var gs []Grant
	for _, v := range vs {
		gs = append(gs, Grant{Lease: v.Live.ID, Job: v.Job})
	}
	return gs, nil
}

// WorkerViews returns the live leases worker holds, by token, each as its job
// with the lease (Live, never nil).
func (s *Service) WorkerViews(ctx context.Context, worker string) ([]JobView, error) {
	if err := CheckID("worker", worker); err != nil {
		return nil, err
	}
	var vs []JobView
	err := s.read(ctx, func(t *projection.Table) {
		for _, l := range t.Leases(projection.LeaseFilter{Worker: worker}) {
			j, _ := t.Job(l.Job)
			vs = append(vs, JobView{Job: j, Live: &l})
		}
	})
	return vs, err
}

// GrantViews returns gs as the table has them now: each the job as granted,
// with its lease as the table holds it (Live nil if it holds it no more). An
// acquire's answer is read back this way.
func (s *Service) GrantViews(ctx context.Context, gs []Grant) ([]JobView, error) {
	vs := make([]JobView, 0, len(gs))
	err := s.read(ctx, func(t *projection.Table) {
		for _, g := range gs {
			v := JobView{Job: g.Job}
			if l, ok := t.Lease(g.Lease); ok {
				v.Live = &l
			}
			vs = append(vs, v)
		}
	})
	return vs, err
}

// Workers returns every worker the table knows, by id, with whether it is
// reachable and how many live leases it holds (the dashboard's workers page).
func (s *Service) Workers(ctx context.Context) ([]projection.Worker, error) {
	var ws []projection.Worker
	err := s.read(ctx, func(t *projection.Table) { ws = t.Workers() })
	return ws, err
}

// Seq is the sequence number of the last durable event the table holds.
func (s *Service) Seq(ctx context.Context) (uint64, error) {
	var seq uint64
	err := s.read(ctx, func(t *projection.Table) { seq = t.Seq() })
	return seq, err
}

// Counts is what the table counts, for the daemon's metrics: counts the fold
// keeps, and a walk of the live leases and the workers only, so that reading
// them costs what is live, not the length of the history.
type Counts struct {
	Seq         uint64                   // the last event the table holds
	Leases      map[fsm.State]int        // live leases, by state (acquired, running)
	Jobs        map[fsm.State]int        // jobs, by each state of fsm.States
	Events      [event.NumTypes]uint64   // events, by type
	Reported    map[event.Outcome]uint64 // jobs reported, by outcome (succeeded, failed, cancelled, killed)
	Reachable   int                      // workers the table knows, by reachability
	Unreachable int
	// Unroutable is how many queued jobs no worker present can take: none
	// of them takes their kind or offers their labels (schedule.go).
	Unroutable int
}

// Counts returns the table's counts, once the events they count are durable.
func (s *Service) Counts(ctx context.Context) (Counts, error) {
	c := Counts{Leases: map[fsm.State]int{}, Jobs: map[fsm.State]int{}, Reported: map[event.Outcome]uint64{}}
	err := s.read(ctx, func(t *projection.Table) {
		for _, st := range fsm.States() {
			if st.Live() {
				c.Leases[st] = t.LiveCount(st)
			}
			c.Jobs[st] = t.JobCount(st)
		}
		for _, typ := range event.Types() {
			c.Events[typ] = t.Count(typ)
		}
		for _, o := range event.ReportOutcomes() {
			c.Reported[o] = t.Reported(o)
		}
		for _, w := range t.Workers() {
			if w.Unreachable {
				c.Unreachable++
			} else {
				c.Reachable++
			}
		}
		c.Seq = t.Seq()
		c.Unroutable = s.unroutableLocked(s.now())
	})
	if err != nil {
		return Counts{}, err
	}
	return c, nil
}

// EventFilter selects events. Zero fields select everything; set fields
// combine with AND. The log's indexes answer it (eventlog.Query).
type EventFilter struct {
	Type   event.Type
	Job    string
	Worker string
	After  uint64 // only events with Seq > After: a cursor
	Since  int64  // only events with Time >= Since (Unix ns), if non-zero
	Until  int64  // only events with Time < Until (Unix ns), if non-zero
}

// Events passes fn, in order, the durable events f selects, at most limit of
// them when limit is positive, and returns the seq its read was bounded by:
// every durable event up to it that f selects was passed, unless limit or
// fn's error stopped the read first. fn's event aliases the log's buffers: it
// is valid during the call only (Event.Clone keeps it). An error of fn ends
// the read and is returned as it is. Events reads what is durable already
// and so waits for nothing; a cursor at or past the last durable event reads
// nothing, so that no cursor, up to 2^64−1, can wrap around to the start.
func (s *Service) Events(f EventFilter, limit int, fn func(e *event.Event) error) (uint64, error) {
	upper := s.log.DurableSeq()
	if f.After >= upper {
		return upper, nil
	}
	it := s.log.Query(eventlog.Query{Type: f.Type, Job: f.Job, Worker: f.Worker, After: f.After,
		Since: f.Since, Until: f.Until, Limit: limit})
	var ferr error
	for ferr == nil && it.Next() {
		ferr = fn(it.Event())
	}
	if err := it.Close(); err != nil && ferr == nil {
		return upper, s.logErr(fmt.Errorf("lease: read events: %w", err), "event query")
	}
	return upper, ferr
}

// WaitDurable returns once every event up to seq is durable: what a reader of
// Events waits on for more. It returns an error wrapping ctx's when ctx ends
// first, or ErrFailed when the log fails.
func (s *Service) WaitDurable(ctx context.Context, seq uint64) error {
	return s.waitDurable(ctx, seq)
}
