package worker

import (
	"context"
	"sync"
	"time"
)

// heartbeatLoop sends one heartbeat for all held leases every renew, acts on
// the directives, and checks the fence every renew/4 (but not while it wakes
// from a pause: Core.Turn). A heartbeat runs on
// its own goroutine, at most one at a time, so that the fence is checked
// while one is in flight: a heartbeat lost on the way waits for its whole
// timeout (renew), and one after another they would otherwise keep the
// fence from ever being checked. The loop re-reads the timing at every step:
// the daemon's answers may change it (a worker starts with defaults until
// the first answer).
func (w *Worker) heartbeatLoop(ctx context.Context) {
	var inflight sync.WaitGroup
	defer inflight.Wait()
	answered := make(chan struct{}, 1)
	for {
		w.mu.Lock()
		now := w.now()
		ids, due, fence := w.mu.core.Turn(now)
		timeout, every := w.mu.core.BeatTimeout(), w.mu.core.FenceEvery()
		w.mu.Unlock()
		if due {
			inflight.Add(1)
			go func() {
				defer inflight.Done()
				w.beat(ctx, ids, now, timeout)
				select { // one pending wake-up is enough; never block, or Run could not return
				case answered <- struct{}{}:
				default:
				}
			}()
		}
		if fence {
			w.checkFence()
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-answered: // the next heartbeat may be due, the fence lifted, renew changed
			t.Stop()
		}
	}
}

// beat sends one heartbeat naming ids, sent at sent, and acts on the answer.
func (w *Worker) beat(ctx context.Context, ids []uint64, sent time.Time, timeout time.Duration) {
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	reply, err := w.opts.Daemon.Heartbeat(callCtx, w.opts.ID, ids)
	cancel()
	if err != nil {
		w.mu.Lock()
		w.mu.core.Unacked()
		w.mu.Unlock()
		if denied(err) && ctx.Err() == nil {
			w.refused("heartbeat", err)
			return
		}
		if ctx.Err() == nil {
			w.log().Warn().Err(err).Msg("heartbeat not acknowledged")
		}
		return
	}
	w.fenceMu.Lock()
	w.mu.Lock()
	a := w.mu.core.Acked(sent, w.now(), reply)
	w.mu.Unlock()
	for _, d := range a.Fence {
		d.Run.Fence(d.At) // before anything else: the supervisor may be about to kill
	}
	w.fenceMu.Unlock()
	if a.Unfenced {
		w.log().Info().Msg("heartbeat acknowledged again: taking work again")
	}
	for _, s := range a.Stop {
		if s.Why == CauseGone {
			w.log().Warn().Uint64("lease", s.Lease).Msg("lease gone; dropping the job")
		} else {
			w.log().Info().Uint64("lease", s.Lease).Stringer("directive", s.Why).Msg("revoked")
		}
	}
	w.apply(a.Stop, a.Forget)
	for _, h := range a.Start {
		w.log().Info().Uint64("lease", h.Lease()).Str("job", h.Grant().Job.ID).Msg("adopted lease renewed: starting its job")
		w.leases.Go(func() { w.run(ctx, h) })
	}
	for _, e := range a.Report {
		w.leases.Go(func() { w.report(ctx, e.Held, e.Outcome) })
	}
}

// checkFence stops every job once the last acknowledged heartbeat was sent
// more than toleration − 2×renew ago.
func (w *Worker) checkFence() {
	w.mu.Lock()
	stops, fell, silent, fence := w.mu.core.Fence(w.now())
	w.mu.Unlock()
	if !fell {
		return
	}
	w.log().Error().Float64("silent_seconds", silent.Seconds()).Float64("fence_seconds", fence.Seconds()).Int("jobs", len(stops)).
		Msg("self-fencing: no heartbeat acknowledged in time; stopping every job before the daemon may expire its lease")
	w.apply(stops, nil)
}
