package worker

import (
	"context"
	"time"

	"github.com/leaselog/leaselog/lease"
)

// heartbeatLoop sends one heartbeat for all held leases every renew, acts on
// the directives, and checks the fence a few times per renew. It re-reads the
// timing at every step: the daemon's answers may change it (a worker starts
// with defaults until the first answer).
func (w *Worker) heartbeatLoop(ctx context.Context) {
	var lastSent time.Time
	for {
		renew := w.renew()
		if lastSent.IsZero() || w.now().Sub(lastSent) >= renew {
			lastSent = w.now()
			w.beat(ctx, renew)
			continue // the answer may have changed renew
		}
		w.checkFence()
		t := time.NewTimer(renew / 4)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// beat sends one heartbeat. Its send time becomes the last acknowledged
// one only if the daemon answers: what the daemon's expiry counts from is the
// receipt of a heartbeat, which comes after its sending, so fencing from the
// send time is always on the safe side.
func (w *Worker) beat(ctx context.Context, renew time.Duration) {
	ids := w.Leases()
	sent := w.now()
	callCtx, cancel := context.WithTimeout(ctx, renew)
	reply, err := w.opts.Daemon.Heartbeat(callCtx, w.opts.ID, ids)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.log().Warn().Err(err).Msg("heartbeat not acknowledged")
		}
		return
	}
	w.mu.Lock()
	if sent.After(w.mu.lastAck) {
		w.mu.lastAck = sent
	}
	if reply.RenewSeconds > 0 {
		w.mu.timing = reply.Timing
	}
	if w.mu.fenced {
		w.mu.fenced = false
		w.log().Info().Msg("heartbeat acknowledged again: taking work again")
	}
	w.mu.Unlock()
	for _, d := range reply.Leases {
		switch d.Directive {
		case lease.Cancel, lease.Kill:
			w.mu.Lock()
			h := w.mu.held[d.Lease]
			w.mu.Unlock()
			if h != nil && h.run != nil {
				w.log().Info().Uint64("lease", d.Lease).Str("directive", string(d.Directive)).Msg("revoked")
				h.run.Stop(d.Directive == lease.Kill)
			}
		case lease.Gone:
			w.log().Warn().Uint64("lease", d.Lease).Msg("lease gone; dropping the job")
			w.drop(d.Lease)
		}
	}
}

// checkFence stops every job once the last acknowledged heartbeat was sent
// more than toleration − 2×renew ago.
func (w *Worker) checkFence() {
	w.mu.Lock()
	fence := w.mu.timing.Config().SelfFence()
	silent := w.now().Sub(w.mu.lastAck)
	if silent <= fence || w.mu.fenced {
		w.mu.Unlock()
		return
	}
	w.mu.fenced = true
	var runs []Run
	for _, h := range w.mu.held {
		if h.run == nil || h.fenced || isDone(h.run) {
			continue // a job that ended on its own keeps its own outcome
		}
		h.fenced = true
		runs = append(runs, h.run)
	}
	w.mu.Unlock()
	w.log().Error().Dur("silent", silent).Dur("fence", fence).Int("jobs", len(runs)).
		Msg("self-fencing: no heartbeat acknowledged in time; stopping every job before the daemon may expire its lease")
	for _, r := range runs {
		r.Stop(true)
	}
}

func isDone(r Run) bool {
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}
