package lease

import (
	"context"
	"time"

	"github.com/leaselog/leaselog/eventlog"
)

func (s *Service) now() int64 { return s.clock.Now().UnixNano() }

// Sweep is one tick of the sweeper. It first looks at its own life: if the
// last tick is further in the past than grace_seconds, the daemon was absent
// (asleep, stopped, starved) and the whole gap is recorded as daemon.resumed,
// which takes it out of every deadline before anything is judged. Then every
// reachable worker silent past grace_seconds becomes worker.unreachable, and
// every lease silent past toleration_seconds expires: a run fails ("worker
// lost", not an attempt); an evaluation goes back to the queue with a new
// token to come, or is cancelled if it had been revoked.
func (s *Service) Sweep() error {
	if err := s.lock(); err != nil {
		return err
	}
	now := s.now()
	var evs []eventlog.Event
	var gap int64
	if d := now - s.mu.lastTick; d > int64(s.cfg.Grace) {
		gap = d
		evs = append(evs, eventlog.Event{Type: eventlog.TypeDaemonResumed, Gap: gap})
	}
	s.mu.lastTick = now
	leases, workers := s.mu.table.Silent(now-gap, int64(s.cfg.Grace), int64(s.cfg.Toleration))
	for _, w := range workers {
		evs = append(evs, eventlog.Event{Type: eventlog.TypeWorkerUnreachable, Worker: w.ID})
	}
	for _, l := range leases {
		evs = append(evs, eventlog.Event{Type: eventlog.TypeExpired, Job: l.Job, Lease: l.ID, Worker: l.Worker})
		e := &evs[len(evs)-1]
		switch {
		case l.Kind == eventlog.KindRun:
			e.Reason = eventlog.ReasonWorkerLost
		case l.Mode != 0:
			e.Reason = eventlog.ReasonRevokedLost
			evs = append(evs, eventlog.Event{Type: eventlog.TypeCancelled, Job: l.Job, Reason: eventlog.ReasonRevokedLost})
		default:
			e.Reason = eventlog.ReasonLeaseExpired
			evs = append(evs, eventlog.Event{Type: eventlog.TypeQueued, Job: l.Job, Reason: eventlog.ReasonLeaseExpired})
		}
	}
	if len(evs) == 0 {
		s.mu.Unlock()
		return s.snapshot(false)
	}
	c, err := s.commitLocked(now, evs)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.wait(c); err != nil {
		return err
	}
	return s.snapshot(false)
}

// Run sweeps every Config.SweepEvery until ctx is done. The ticker only
// paces the sweeps; what each decides comes from the injected clock.
func (s *Service) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.SweepEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := s.Sweep(); err != nil {
				return err
			}
		}
	}
}
