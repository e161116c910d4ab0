package worker

import (
	"context"
	"time"

	"github.com/leaselog/leaselog/api"
)

// The acquire side of a worker: the loop that takes jobs while there is
// room, and what it does for the leases granted to calls whose answer never
// came — lost on the way (adoptOrphans), or cut by the stop (stopped).

// acquire asks for up to max jobs, long-polling, with the worker's offer.
func (w *Worker) acquire(ctx context.Context, max int) ([]api.Grant, error) {
	if r, ok := w.opts.Daemon.(Router); ok {
		return r.AcquireOffer(ctx, w.opts.ID, max, w.opts.Wait, w.opts.Offer)
	}
	return w.opts.Daemon.Acquire(ctx, w.opts.ID, max, w.opts.Wait)
}

// acquireLoop takes jobs while there is room, long-polling for them.
func (w *Worker) acquireLoop(ctx context.Context) {
	backoff := w.backoff()
	for ctx.Err() == nil {
		w.mu.Lock()
		room := w.mu.core.Room()
		w.mu.Unlock()
		if room <= 0 {
			select { // wait for a slot, or for the fence to lift
			case <-w.freed:
			case <-ctx.Done():
			case <-time.After(w.renew()):
			}
			continue
		}
		callCtx, cancel := context.WithTimeout(ctx, w.callTimeout(w.opts.Wait))
		sent := w.now()
		grants, err := w.acquire(callCtx, room)
		cancel()
		if ctx.Err() != nil {
			// The stop cut the call, or came as it was answered: what it
			// may have been granted is stopped's to take.
			w.cut.Store(true)
			return
		}
		if err != nil {
			if denied(err) {
				w.refused("acquire", err)
				return
			}
			wait := backoff.Next()
			if api.IsCode(err, api.CodeStopping) {
				w.log().Debug().Msg("the daemon is stopping; asking again later")
			} else {
				w.log().Warn().Err(err).Float64("retry_in_seconds", wait.Seconds()).Msg("acquire failed; retrying")
			}
			sleep(ctx, wait)
			if Retry(err) {
				w.adoptOrphans(ctx)
			}
			continue
		}
		backoff.Reset()
		for _, g := range grants {
			w.start(ctx, g, sent)
		}
	}
}

// adoptOrphans takes the live leases the daemon holds for this worker but
// the worker does not know: an acquire whose answer was lost on the way
// still granted its leases, and left alone they would expire without ever
// running. Their jobs start once the next heartbeat renews them.
func (w *Worker) adoptOrphans(ctx context.Context) {
	w.adoptMu.Lock()
	defer w.adoptMu.Unlock()
	orphans, err := w.adoptListed(ctx)
	if err != nil {
		return // the daemon is still out of reach; the next failure asks again
	}
	for _, g := range orphans {
		w.log().Warn().Uint64("lease", g.Lease).Str("job", g.Job.ID).Msg("adopting a lease whose grant was lost on the way")
	}
}

// adoptListed asks the daemon for the worker's live leases, and adopts
// each the worker never learned of (Core.Orphans, Core.Adopt): it returns
// those, or the call's error.
func (w *Worker) adoptListed(ctx context.Context) ([]api.Grant, error) {
	w.mu.Lock()
	mark := w.mu.core.ListMark()
	w.mu.Unlock()
	callCtx, cancel := context.WithTimeout(ctx, w.callTimeout(0))
	grants, err := w.opts.Daemon.WorkerLeases(callCtx, w.opts.ID)
	cancel()
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	orphans := w.mu.core.Orphans(grants, mark)
	for _, g := range orphans {
		w.mu.core.Adopt(g)
	}
	return orphans, nil
}

// stopped takes, once the loops and the goroutines of single leases ended
// on a stop, the leases a call the stop cut may have been granted: a long
// poll (or a report's next) granted just before the daemon heard its
// caller go, an answer nobody reads. Left alone such a lease would expire
// toleration later, its job never run — an evaluation queued again only
// then, a run failed ("worker lost"). So the worker asks for its lease
// list; each lease it never learned of (Core.Orphans) is adopted, renewed
// by one heartbeat as any adopted lease is (Core.Adopt) and started like
// any grant, then left as the stop leaves every job: running under its
// supervisor, its lease kept for a restarted worker to re-attach. One
// revoked before it started is reported as the heartbeat loop would.
//
// Each call has the call timeout: a daemon out of reach holds the stop
// that long, once, and the lease then expires as it would have.
func (w *Worker) stopped(ctx context.Context) {
	if !w.cut.Load() {
		return
	}
	ctx = context.WithoutCancel(ctx)
	orphans, err := w.adoptListed(ctx)
	if err != nil {
		w.log().Warn().Err(err).Msg("stopping: the lease list failed; a lease granted to a call the stop cut expires")
		return
	}
	if len(orphans) == 0 {
		return
	}
	ids := w.Leases()
	for _, g := range orphans {
		w.log().Warn().Uint64("lease", g.Lease).Str("job", g.Job.ID).Msg("stopping: starting a lease granted to a call the stop cut")
	}
	a := w.beat(ctx, api.Heartbeat{Leases: ids}, w.now(), w.callTimeout(0))
	for _, h := range a.Start {
		err := w.launch(ctx, h) // as long as the executor takes, as any start
		callCtx, cancel := context.WithTimeout(ctx, w.callTimeout(0))
		switch {
		case err != nil:
			w.report(callCtx, h, NotStarted(err))
		case !Running(h.Grant()):
			w.tellStarted(callCtx, h.Lease())
		}
		cancel()
	}
	for _, e := range a.Report {
		callCtx, cancel := context.WithTimeout(ctx, w.callTimeout(0))
		w.report(callCtx, e.Held, e.Outcome)
		cancel()
	}
}
