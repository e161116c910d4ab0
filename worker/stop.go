package worker

import (
	"context"

	"github.com/leaselog/leaselog/api"
)

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
	w.mu.Lock()
	mark := w.mu.core.ListMark()
	w.mu.Unlock()
	callCtx, cancel := context.WithTimeout(ctx, w.callTimeout(0))
	grants, err := w.opts.Daemon.WorkerLeases(callCtx, w.opts.ID)
	cancel()
	if err != nil {
		w.log().Warn().Err(err).Msg("stopping: the lease list failed; a lease granted to a call the stop cut expires")
		return
	}
	w.mu.Lock()
	orphans := w.mu.core.Orphans(grants, mark)
	for _, g := range orphans {
		w.mu.core.Adopt(g)
	}
	ids := w.mu.core.Leases()
	w.mu.Unlock()
	if len(orphans) == 0 {
		return
	}
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
