package lease

import (
	"context"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/projection"
)

func (s *Service) now() int64 { return s.clock.Now().UnixNano() }

// Sweep is one tick of the sweeper. It first looks at its own life, as every
// command does (awakeLocked): if the last tick or command is further in the
// past than grace_seconds, the daemon was absent (asleep, stopped, starved)
// and the whole gap is recorded as daemon.resumed, which takes it out of
// every deadline before anything is judged. Then every reachable worker
// silent past grace_seconds becomes worker.unreachable, and every lease
// silent past toleration_seconds expires: a run fails ("worker lost", not an
// attempt); an evaluation goes back to the queue with a new token to come, is
// cancelled if it had been revoked, or fails at its cap (see lostLocked).
// The jobs whose not_before has come are let be taken, and the acquires
// waiting woken for them. Last, the sweep's time becomes the daemon's alive
// mark (markAlive).
func (s *Service) Sweep() error {
	now, err := command(context.Background(), s, "sweep", func(t *tx) (int64, error) {
		t.noReadWait = true // a sweep answers no one
		// The resume, if any, is its own batch, folded before the table
		// judges silence: deadlines are then in present time, the gap taken
		// out.
		if err := t.resume(); err != nil {
			return 0, err
		}
		now := t.clock()
		var evs []event.Event
		leases, workers := s.mu.table.Silent(now, int64(s.cfg.Grace), int64(s.cfg.Toleration))
		for _, w := range workers {
			evs = append(evs, event.Event{Type: event.TypeWorkerUnreachable, Worker: w.ID})
		}
		for _, l := range leases {
			reason := event.ReasonLeaseExpired
			switch {
			case l.Kind == event.KindRun:
				reason = event.ReasonWorkerLost
			case l.Mode != 0:
				reason = event.ReasonRevokedLost
			}
			evs = s.lostLocked(evs, l, event.Event{Type: event.TypeExpired, Reason: reason}, event.ReasonLeaseExpired)
		}
		_, err := t.stage(evs...)
		if s.mu.table.Promote(now) > 0 {
			s.wakeLocked()
		}
		s.forgetOffersLocked(now)
		return now, err
	})
	if err != nil {
		return err
	}
	s.markAlive(now)
	return s.snapshot(false)
}

// markAlive records now, the time of a sweep that found the daemon present
// (any absence before it recorded and durable), as the daemon's alive mark:
// a start after a crash counts as its absence only the time since (Open),
// not the time it ran on after its last event. The mark goes to the OS with
// no sync and no event (eventlog's PutAlive): a process killed keeps it; a
// host that loses power may keep an older one, which only lengthens the
// absence counted. A write that fails is logged, once until one succeeds,
// and changes nothing else: without the mark the absence counts from the
// last event, as erring on the safe side does.
func (s *Service) markAlive(now int64) {
	if err := s.log.PutAlive(now); err != nil {
		if !s.aliveFailing.Swap(true) {
			s.logger.Warn().Err(err).Msg("alive mark not written: a restart will count the downtime from the last mark or event")
		}
		return
	}
	s.aliveFailing.Store(false)
}

// lostLocked appends the events that end live lease l whose worker is lost:
// loss itself (lease.expired, found by the sweeper, or lease.lost, said by
// the worker), with l's job, lease and worker filled in; then, for an
// evaluation, lease.queued (with reason requeue) to run it again under a new
// token, or lease.cancelled if it had been revoked — an executor that asked
// for a job to stop does not want it to run again —, or lease.failed ("lost
// N times") if it was queued again after losses as often as its cap allows
// (max_requeues): a job that loses every worker it goes to is not queued
// for ever. A run fails with the loss itself: its agent's session cannot be
// resumed elsewhere. Either way the loss is never an attempt.
func (s *Service) lostLocked(evs []event.Event, l projection.Lease, loss event.Event, requeue string) []event.Event {
	loss.Job, loss.Lease, loss.Worker = l.Job, l.ID, l.Worker
	evs = append(evs, loss)
	switch {
	case l.Kind == event.KindRun:
	case l.Mode != 0:
		evs = append(evs, event.Event{Type: event.TypeCancelled, Job: l.Job, Reason: event.ReasonRevokedLost})
	default:
		j, _ := s.mu.table.Job(l.Job)
		if n := s.mu.table.Requeues(l.Job); j.MaxRequeues != 0 && n >= j.MaxRequeues {
			evs = append(evs, event.Event{Type: event.TypeFailed, Job: l.Job, Reason: event.LostTimes(n + 1)})
		} else {
			evs = append(evs, event.Event{Type: event.TypeQueued, Job: l.Job, Reason: requeue})
		}
	}
	return evs
}

// Run sweeps every timing.Config.SweepEvery until ctx is done. The ticker only
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
