// Package worker is the worker side of a lease: the loop every Go worker
// runs, remote (`leaselog worker`, over HTTP) or local (inside `leaselog
// serve`, in process). It owns the worker's leases — taking them, one
// heartbeat every renew_seconds for all of them, acting on the directives of
// each reply, reporting each job's outcome until the daemon answers — and it
// fences itself: once its last acknowledged heartbeat was sent more than
// toleration − 2×renew ago, it stops every job, two heartbeats before the
// daemon may expire them, so that a job never runs twice. An Executor (for
// example worker/local) owns the processes.
//
// On start the worker asks the daemon which leases it still holds and
// re-attaches to each job its executor can find; a lease whose job is gone is
// reported lost.
package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
)

// Daemon is what a worker needs of the daemon. *api.Client is one (remote);
// InProcess adapts a lease.Service (the built-in local worker).
type Daemon interface {
	Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error)
	Heartbeat(ctx context.Context, worker string, leases []uint64) (api.HeartbeatReply, error)
	WorkerLeases(ctx context.Context, worker string) ([]api.Grant, error)
	Start(ctx context.Context, worker string, lease uint64) (api.Lease, error)
	Report(ctx context.Context, lease uint64, r api.Report) (api.ReportReply, error)
}

// Options configures a Worker.
type Options struct {
	ID       string
	Capacity int // jobs at once; at least 1
	Daemon   Daemon
	Executor Executor
	Logger   zerolog.Logger
	// Timing is what the worker assumes until the daemon says otherwise
	// (every acquire and heartbeat reply carries the daemon's timing).
	Timing api.Timing
	// Wait is how long one acquire long-polls; 0 means 30s.
	Wait time.Duration
	// Now reads the worker's own clock for its decisions (self-fencing). It
	// must carry a monotonic reading; nil means time.Now.
	Now func() time.Time
}

// Worker runs leases. Create with New, then Run.
type Worker struct {
	opts Options
	now  func() time.Time

	mu struct {
		sync.Mutex
		timing  api.Timing
		held    map[uint64]*held
		lastAck time.Time // when the last acknowledged heartbeat was sent
		fenced  bool
	}
	freed chan struct{} // a slot freed up: acquire again
}

// held is one lease the worker holds.
type held struct {
	grant   api.Grant
	run     Run  // nil until started
	dropped bool // the daemon said gone: stop, and do not report
	fenced  bool // stopped by self-fencing
}

// New returns a worker.
func New(opts Options) (*Worker, error) {
	if opts.ID == "" || opts.Daemon == nil || opts.Executor == nil {
		return nil, errors.New("worker: ID, Daemon and Executor are required")
	}
	if opts.Capacity < 1 {
		return nil, fmt.Errorf("worker: capacity must be at least 1, is %d", opts.Capacity)
	}
	if err := opts.Timing.Config().Validate(); err != nil {
		return nil, fmt.Errorf("worker: timing: %w", err)
	}
	if opts.Wait <= 0 {
		opts.Wait = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	w := &Worker{opts: opts, now: opts.Now, freed: make(chan struct{}, 1)}
	w.mu.timing = opts.Timing
	w.mu.held = make(map[uint64]*held)
	w.mu.lastAck = w.now()
	return w, nil
}

func (w *Worker) log() *zerolog.Logger { return &w.opts.Logger }

// Run re-attaches to the leases the daemon still holds for this worker, then
// takes, runs and reports jobs until ctx is done. Jobs in flight are left
// running when it returns: their leases stay, and a restarted worker
// re-attaches to them.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.reattach(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.heartbeatLoop(ctx) }()
	go func() { defer wg.Done(); w.acquireLoop(ctx) }()
	wg.Wait()
	return nil
}

// Leases returns the leases the worker holds now, sorted.
func (w *Worker) Leases() []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]uint64, 0, len(w.mu.held))
	for id := range w.mu.held {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (w *Worker) timing() api.Timing {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.timing
}

func (w *Worker) renew() time.Duration { return w.timing().Config().Renew }

// reattach asks the daemon for this worker's live leases and picks up each
// job the executor can still find; the others are reported lost.
func (w *Worker) reattach(ctx context.Context) error {
	var grants []api.Grant
	err := w.retry(ctx, "list leases", func() error {
		var err error
		grants, err = w.opts.Daemon.WorkerLeases(ctx, w.opts.ID)
		return err
	})
	if err != nil {
		return fmt.Errorf("worker %s: re-attach: %w", w.opts.ID, err)
	}
	for _, g := range grants {
		run, found, err := w.opts.Executor.Reattach(ctx, g)
		h := &held{grant: g, run: run}
		w.mu.Lock()
		w.mu.held[g.Lease] = h
		w.mu.Unlock()
		switch {
		case err != nil || !found:
			reason := "worktree gone: the job was lost while the worker was down"
			if err != nil {
				reason = "re-attach failed: " + err.Error()
			}
			w.log().Warn().Uint64("lease", g.Lease).Str("job", g.Job.ID).Str("reason", reason).Msg("lease lost on restart")
			go w.report(ctx, h, Outcome{Outcome: "failed", Reason: reason})
		default:
			w.log().Info().Uint64("lease", g.Lease).Str("job", g.Job.ID).Msg("re-attached")
			go w.await(ctx, h)
		}
	}
	return nil
}

// acquireLoop takes jobs while there is room, long-polling for them.
func (w *Worker) acquireLoop(ctx context.Context) {
	backoff := newBackoff(w.renew())
	for ctx.Err() == nil {
		w.mu.Lock()
		room := w.opts.Capacity - len(w.mu.held)
		fenced := w.mu.fenced
		w.mu.Unlock()
		if room <= 0 || fenced {
			select { // wait for a slot, or for the fence to lift
			case <-w.freed:
			case <-ctx.Done():
			case <-time.After(w.renew()):
			}
			continue
		}
		grants, err := w.opts.Daemon.Acquire(ctx, w.opts.ID, room, w.opts.Wait)
		if err != nil {
			if ctx.Err() == nil {
				if api.IsCode(err, api.CodeStopping) {
					w.log().Debug().Msg("the daemon is stopping; asking again later")
				} else {
					w.log().Warn().Err(err).Msg("acquire failed; retrying")
				}
				backoff.wait(ctx)
				if api.Retryable(err) {
					w.adoptOrphans(ctx)
				}
			}
			continue
		}
		backoff.reset()
		for _, g := range grants {
			w.start(ctx, g)
		}
	}
}

// adoptOrphans starts the jobs of live leases the daemon holds for this
// worker but the worker does not know: an acquire whose answer was lost on
// the way still granted its leases, and left alone they would expire
// without ever running.
func (w *Worker) adoptOrphans(ctx context.Context) {
	grants, err := w.opts.Daemon.WorkerLeases(ctx, w.opts.ID)
	if err != nil {
		return // the daemon is still out of reach; the next failure asks again
	}
	for _, g := range grants {
		w.mu.Lock()
		_, known := w.mu.held[g.Lease]
		w.mu.Unlock()
		if !known {
			w.log().Warn().Uint64("lease", g.Lease).Str("job", g.Job.ID).Msg("adopting a lease whose grant was lost on the way")
			w.start(ctx, g)
		}
	}
}

// start runs the job of a new lease and tells the daemon it started.
func (w *Worker) start(ctx context.Context, g api.Grant) {
	w.mu.Lock()
	if g.Timing.RenewSeconds > 0 {
		w.mu.timing = g.Timing
	}
	h := &held{grant: g}
	w.mu.held[g.Lease] = h
	w.mu.Unlock()
	run, err := w.opts.Executor.Start(ctx, g)
	if err != nil {
		w.log().Warn().Err(err).Uint64("lease", g.Lease).Str("job", g.Job.ID).Msg("job could not start")
		go w.report(ctx, h, Outcome{Outcome: "failed", Reason: "could not start: " + err.Error()})
		return
	}
	w.mu.Lock()
	h.run = run
	stop := h.dropped || w.mu.fenced // a heartbeat said gone (or the fence fell) while it started
	w.mu.Unlock()
	if stop {
		run.Stop(true)
	}
	w.log().Info().Uint64("lease", g.Lease).Str("job", g.Job.ID).Msg("job started")
	go func() {
		err := w.retry(ctx, "start", func() error {
			_, err := w.opts.Daemon.Start(ctx, w.opts.ID, g.Lease)
			return err
		})
		if err != nil && ctx.Err() == nil {
			// Fenced off (stale, or not ours): the job must not run on.
			w.log().Warn().Err(err).Uint64("lease", g.Lease).Msg("start refused; stopping the job")
			w.drop(g.Lease)
		}
	}()
	w.await(ctx, h)
}

// await waits for a run to end, then reports it.
func (w *Worker) await(ctx context.Context, h *held) {
	go func() {
		select {
		case <-h.run.Done():
		case <-ctx.Done():
			return // the job runs on; a restarted worker re-attaches
		}
		w.mu.Lock()
		dropped, fenced := h.dropped, h.fenced
		w.mu.Unlock()
		if dropped {
			w.forget(h)
			return
		}
		o := h.run.Outcome()
		if fenced {
			o.Outcome = "killed"
			o.Reason = "self-fenced: no heartbeat acknowledged for toleration − 2×renew"
		}
		w.report(ctx, h, o)
	}()
}

// report sends a job's outcome until the daemon answers for good. Reports
// are idempotent, so a retry after a lost answer is safe.
func (w *Worker) report(ctx context.Context, h *held, o Outcome) {
	r := api.Report{Worker: w.opts.ID, Outcome: o.Outcome, Ref: o.Ref, Reason: o.Reason, Result: o.Result}
	var reply api.ReportReply
	err := w.retry(ctx, "report", func() error {
		var err error
		reply, err = w.opts.Daemon.Report(ctx, h.grant.Lease, r)
		return err
	})
	switch {
	case ctx.Err() != nil:
		return // not reported: the lease stays, and a restarted worker reports it
	case err == nil:
		w.log().Info().Uint64("lease", h.grant.Lease).Str("job", h.grant.Job.ID).Str("outcome", o.Outcome).Uint64("seq", reply.Seq).Msg("reported")
	case api.IsCode(err, api.CodeStaleLease):
		w.log().Warn().Uint64("lease", h.grant.Lease).Str("job", h.grant.Job.ID).Msg("report refused as stale; kept by the daemon for auditors")
	default:
		w.log().Error().Err(err).Uint64("lease", h.grant.Lease).Msg("report refused")
	}
	w.forget(h)
}

func (w *Worker) forget(h *held) {
	w.mu.Lock()
	if w.mu.held[h.grant.Lease] == h {
		delete(w.mu.held, h.grant.Lease)
	}
	w.mu.Unlock()
	select {
	case w.freed <- struct{}{}:
	default:
	}
}

// drop stops the job of a lease that is not the worker's any more and
// forgets it without a report.
func (w *Worker) drop(lease uint64) {
	w.mu.Lock()
	h := w.mu.held[lease]
	if h == nil {
		w.mu.Unlock()
		return
	}
	h.dropped = true
	run := h.run
	w.mu.Unlock()
	if run != nil {
		run.Stop(true)
	} else {
		w.forget(h)
	}
}

// retry calls f until it succeeds, fails for good (a 4xx), or ctx ends.
func (w *Worker) retry(ctx context.Context, what string, f func() error) error {
	b := newBackoff(w.renew())
	for {
		err := f()
		if err == nil || !api.Retryable(err) || ctx.Err() != nil {
			return err
		}
		w.log().Debug().Err(err).Str("call", what).Msg("retrying")
		b.wait(ctx)
	}
}

// backoff waits longer after each failure, from 50ms up to max.
type backoff struct {
	next, max time.Duration
}

func newBackoff(max time.Duration) *backoff { return &backoff{next: 50 * time.Millisecond, max: max} }

func (b *backoff) reset() { b.next = 50 * time.Millisecond }

func (b *backoff) wait(ctx context.Context) {
	t := time.NewTimer(b.next)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	b.next = min(2*b.next, b.max)
}
