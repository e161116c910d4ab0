package worker

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/leaselog/leaselog/api"
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
		beat, fence, every := w.turn(ctx)
		if beat != nil {
			inflight.Add(1)
			go func() {
				defer inflight.Done()
				beat()
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

// turn is one turn of the heartbeat loop now (Core.Turn): the heartbeat due
// as a call to make (nil when none is), whether the fence is to be checked,
// and how long until the next turn.
func (w *Worker) turn(ctx context.Context) (beat func(), fence bool, every time.Duration) {
	w.mu.Lock()
	now := w.now()
	ids, due, fence := w.mu.core.Turn(now)
	timeout, every := w.mu.core.BeatTimeout(), w.mu.core.FenceEvery()
	var runs map[*Held]Progresser
	if due {
		runs = w.progressers()
	}
	w.mu.Unlock()
	if !due {
		return nil, fence, every
	}
	return func() {
		details := w.details(runs)
		a := w.beat(ctx, api.Heartbeat{Leases: ids, Details: details}, now, timeout)
		for _, h := range a.Start {
			w.log().Info().Uint64("lease", h.Lease()).Str("job", h.Grant().Job.ID).Msg("adopted lease renewed: starting its job")
			w.leases.Go(func() { w.run(ctx, h) })
		}
		for _, e := range a.Report {
			w.leases.Go(func() { w.report(ctx, e.Held, e.Outcome) })
		}
	}, fence, every
}

// progressers are the runs of the held leases whose jobs tell their
// progress. Called with w.mu held.
func (w *Worker) progressers() map[*Held]Progresser {
	var out map[*Held]Progresser
	d, ok := w.opts.Daemon.(Detailer)
	if !ok || d == nil {
		return nil
	}
	for _, id := range w.mu.core.Leases() {
		h := w.mu.core.Held(id)
		if p, ok := h.Run().(Progresser); ok {
			if out == nil {
				out = make(map[*Held]Progresser)
			}
			out[h] = p
		}
	}
	return out
}

// details reads the progress of runs (outside w.mu: it is file I/O) and
// returns what the heartbeat due carries (Core.BeatDetails).
func (w *Worker) details(runs map[*Held]Progresser) map[uint64]json.RawMessage {
	if len(runs) == 0 {
		return nil
	}
	read := make(map[*Held][]byte, len(runs))
	for h, p := range runs {
		read[h] = p.Progress()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for h, b := range read {
		w.mu.core.Progress(h, b)
	}
	return w.mu.core.BeatDetails()
}

// beat sends heartbeat hb, sent at sent, and acts on the answer: it pushes
// the deadlines, stops and forgets. The adopted leases the answer renewed
// (Acts.Start) and those revoked before they started (Acts.Report) are the
// caller's to start and report; none when it got no answer.
func (w *Worker) beat(ctx context.Context, hb api.Heartbeat, sent time.Time, timeout time.Duration) Acts {
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	var reply api.HeartbeatReply
	var err error
	if d, ok := w.opts.Daemon.(Detailer); ok && len(hb.Details) > 0 {
		reply, err = d.HeartbeatDetails(callCtx, w.opts.ID, hb)
	} else {
		reply, err = w.opts.Daemon.Heartbeat(callCtx, w.opts.ID, hb.Leases)
	}
	cancel()
	if err != nil {
		w.mu.Lock()
		w.mu.core.Unacked()
		w.mu.Unlock()
		if denied(err) && ctx.Err() == nil {
			w.refused("heartbeat", err)
			return Acts{}
		}
		if ctx.Err() == nil {
			w.log().Warn().Err(err).Msg("heartbeat not acknowledged")
		}
		return Acts{}
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
	return a
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
