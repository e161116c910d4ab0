// Package worker is the worker side of a lease: the loop every Go worker
// runs, remote (`leaselog worker`, over a worker session or HTTP) or local
// (inside `leaselog serve`, in process). It owns the worker's leases — taking them, one
// heartbeat every renew_seconds for all of them, acting on the directives of
// each reply, reporting each job's outcome until the daemon answers — and it
// fences itself: once its last acknowledged heartbeat was sent more than
// toleration − 2×renew ago, it stops every job, two heartbeats before the
// daemon may expire them, so that a job never runs twice. It hands the same
// deadline to each job's supervisor (Run.Fence), which holds it even if the
// worker dies. An Executor (for example worker/local) owns the processes.
//
// A job the worker loses — fenced, granted too late, gone at re-attach,
// killed by its supervisor on its deadline — is reported lost, which the
// daemon folds like an expiry: never an attempt.
//
// On start the worker asks the daemon which leases it still holds and
// re-attaches to each job its executor can find; a lease whose job is gone is
// reported lost.
package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/hostclock"
	"github.com/leaselog/leaselog/timing"
)

// Daemon is what a worker needs of the daemon. *api.Client is one (remote);
// ops.Daemon adapts a lease.Service (the built-in local worker).
type Daemon interface {
	Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error)
	Heartbeat(ctx context.Context, worker string, leases []uint64) (api.HeartbeatReply, error)
	WorkerLeases(ctx context.Context, worker string) ([]api.Grant, error)
	Start(ctx context.Context, worker string, lease uint64) (api.Lease, error)
	Report(ctx context.Context, lease uint64, r api.Report) (api.ReportReply, error)
}

// Router is a Daemon a worker can tell what it takes (api.Offer): *api.Client
// and ops.Daemon are. A worker with an offer needs one.
type Router interface {
	AcquireOffer(ctx context.Context, worker string, max int, wait time.Duration, o api.Offer) ([]api.Grant, error)
}

// Detailer is a Daemon that takes a heartbeat's details (the progress of
// its leases' jobs); *api.Client and ops.Daemon are. A heartbeat with
// details to give goes through it; the others, and every heartbeat to a
// Daemon that is no Detailer, go through Heartbeat.
type Detailer interface {
	HeartbeatDetails(ctx context.Context, worker string, hb api.Heartbeat) (api.HeartbeatReply, error)
}

// Rounder is a Daemon that saves round trips; *api.Client and ops.Daemon
// are. A worker whose Daemon is one reports each job with the next
// acquire for the slot the job frees (Core.NextAfter): a busy worker takes
// its next job in the report of the last, without an acquire of its own.
//
// It does not ask for its grants started (the acquire's or the report's
// "start"), though the daemon offers it: the daemon records a lease running
// when the worker says its job started — once the executor has started the
// job's process and made its run directory, which a restarted worker
// re-attaches to and an auditor reads. A grant recorded running before that
// would claim a process that a crash in between leaves nowhere. Clients
// whose jobs start with their grant (leaselog bench) take the start too.
type Rounder interface {
	// ReportNext is Report carrying the next acquire: its grants in the
	// reply's Next, absent when the answer repeats an earlier one.
	ReportNext(ctx context.Context, lease uint64, r api.Report, next api.Next) (api.ReportReply, error)
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
	Timing timing.Config
	// Wait is how long one acquire long-polls; 0 means 30s.
	Wait time.Duration
	// Offer is what the worker takes: the kinds of job (none: every kind)
	// and the labels it offers. It is sent with every acquire, that of a
	// report too; a worker with one needs a Daemon that is a Router.
	Offer api.Offer
	// NoNextInReport makes the worker take its jobs with its acquire loop
	// only, never in the report of the last (Rounder): for a test of that
	// loop, or a daemon behind a proxy that strips the field.
	NoNextInReport bool
	// Now reads the fence clock: the worker's clock for its decisions
	// (self-fencing), and the clock of the deadlines it gives its runs'
	// supervisors (Run.Fence), which the executor reads too — a clock that
	// never steps, shared by every process on the host (hostclock:
	// Monotonic on the daemon's own host, Boottime elsewhere; see
	// hostclock.For). nil means hostclock.Boottime.Now, which can only make
	// the fence fall sooner.
	Now func() time.Time
	// Rand draws the jitter of every retry delay (Backoff), in [0, 1); nil
	// is math/rand/v2's.
	Rand func() float64
}

// Worker runs leases. Create with New, then Run. It drives a Core (the
// decisions) with goroutines and real timers: one heartbeat loop, one
// acquire loop, and per lease one goroutine that tells the daemon the job
// started and one that awaits and reports it.
type Worker struct {
	opts Options
	now  func() time.Time
	// leases counts the goroutines of single leases (start, await, report,
	// an adopted lease's run): each ends once ctx is done, and Run waits
	// for them.
	leases sync.WaitGroup

	mu struct {
		sync.Mutex
		core *Core
	}
	// fenceMu orders the deadlines pushed to supervisors: each is read from
	// the Core and pushed under it, so a run never gets an older deadline
	// after a newer one (Run.Fence takes an earlier deadline too).
	fenceMu sync.Mutex
	freed   chan struct{} // a slot freed up: acquire again
	rounds  Rounder       // the Daemon, if it saves round trips; else nil
	noNext  atomic.Bool   // the daemon refused a report's next: it predates it
	// cut: the stop cut a call that may have been granted leases (an
	// acquire, a report's next): stopped takes them, and a report sent
	// from then on asks for no next.
	cut atomic.Bool
	// adoptMu makes lease lists for orphans one at a time (Core.ListMark):
	// the acquire loop's and a report's.
	adoptMu sync.Mutex
	// halt stops Run with its cause: a refusal of the worker's token
	// (refused). Set by Run.
	halt context.CancelCauseFunc
	// haltLogged: the first refusal is logged, not the loop's that follow.
	haltLogged atomic.Bool
}

// ErrRefused is wrapped by the error Run returns when the daemon refuses the
// worker's own calls — acquire, heartbeat, its lease list — with 401 (an
// unknown token) or 403 (a token that is not this worker's: an admin's, an
// auditor's, another worker's). Nothing the worker does changes its token,
// so it does not retry: Run stops as on a stop, leaving its jobs to their
// supervisors and their leases to a worker started again with a token that
// is its own. The error wraps the daemon's answer (an *api.Error) too.
var ErrRefused = errors.New("the daemon refuses this worker's token")

// denied reports whether err is a refusal of the caller's token.
func denied(err error) bool {
	var e *api.Error
	return errors.As(err, &e) && (e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden)
}

// refused stops Run with ErrRefused, the call and err as its cause.
func (w *Worker) refused(call string, err error) {
	if w.haltLogged.Swap(true) {
		return // halted already
	}
	w.log().Error().Err(err).Str("call", call).Msg("the daemon refuses this worker's token; stopping")
	w.halt(fmt.Errorf("worker %s: %s: %w: %w", w.opts.ID, call, ErrRefused, err))
}

// New returns a worker.
func New(opts Options) (*Worker, error) {
	if opts.ID == "" || opts.Daemon == nil || opts.Executor == nil {
		return nil, errors.New("worker: ID, Daemon and Executor are required")
	}
	if opts.Capacity < 1 {
		return nil, fmt.Errorf("worker: capacity must be at least 1, is %d", opts.Capacity)
	}
	if err := opts.Timing.Validate(); err != nil {
		return nil, fmt.Errorf("worker: timing: %w", err)
	}
	if opts.Wait <= 0 {
		opts.Wait = 30 * time.Second
	}
	if _, ok := opts.Daemon.(Router); !ok && (len(opts.Offer.Kinds) > 0 || len(opts.Offer.Labels) > 0) {
		return nil, fmt.Errorf("worker: an offer (kinds, labels) needs a daemon that takes it; %T does not", opts.Daemon)
	}
	if opts.Now == nil {
		opts.Now = hostclock.Boottime.Now
	}
	if opts.Rand == nil {
		opts.Rand = defaultRand
	}
	w := &Worker{opts: opts, now: opts.Now, freed: make(chan struct{}, 1)}
	if !opts.NoNextInReport {
		w.rounds, _ = opts.Daemon.(Rounder)
	}
	w.mu.core = NewCore(opts.Capacity, opts.Timing, w.now())
	return w, nil
}

func (w *Worker) log() *zerolog.Logger { return &w.opts.Logger }

// backoff returns the delays of one series of retries: up to renew apart.
func (w *Worker) backoff() *Backoff { return NewBackoff(w.renew(), w.opts.Rand) }

// Run re-attaches to the leases the daemon still holds for this worker, then
// takes, runs and reports jobs until ctx is done. It returns once every
// goroutine it started has ended, those of single leases included. Jobs in
// flight are left running: their leases stay, and a restarted worker
// re-attaches to them. A lease granted to a call the stop cut is started
// first, and left running the same way (stopped).
//
// A refusal of the worker's token (ErrRefused) stops it the same way, and
// Run returns it; a stop through ctx returns nil.
func (w *Worker) Run(ctx context.Context) error {
	ctx, w.halt = context.WithCancelCause(ctx)
	defer w.halt(nil)
	defer w.leases.Wait()
	if err := w.reattach(ctx); err != nil {
		return err
	}
	// The first heartbeat is sent, and answered or given up, before the
	// first acquire: it renews what was re-attached at once, the worker
	// learns the daemon's timing before it takes work, and a lease granted
	// at start is next named a renew later, not at whatever moment the
	// heartbeat loop happened to be scheduled first.
	if beat, _, _ := w.turn(ctx); beat != nil {
		beat()
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.heartbeatLoop(ctx) }()
	go func() { defer wg.Done(); w.acquireLoop(ctx) }()
	wg.Wait()
	if err := context.Cause(ctx); errors.Is(err, ErrRefused) {
		return err
	}
	w.leases.Wait() // a report cut by the stop says so first
	w.stopped(ctx)
	return nil
}

// Leases returns the leases the worker holds now, sorted.
func (w *Worker) Leases() []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.core.Leases()
}

func (w *Worker) renew() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.core.Renew()
}

// callTimeout is the deadline of a call: CallTimeout, plus wait for an
// acquire's long poll.
func (w *Worker) callTimeout(wait time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wait > 0 {
		return w.mu.core.AcquireTimeout(wait)
	}
	return w.mu.core.CallTimeout()
}

// reattach asks the daemon for this worker's live leases and picks up each
// job the executor can still find; the others are reported lost. A
// re-attached run keeps the supervisor's deadline until the first heartbeat
// renews its lease (see Core.Reattached).
func (w *Worker) reattach(ctx context.Context) error {
	var grants []api.Grant
	err := w.retry(ctx, "list leases", func(ctx context.Context) error {
		var err error
		grants, err = w.opts.Daemon.WorkerLeases(ctx, w.opts.ID)
		return err
	})
	if denied(err) {
		return fmt.Errorf("worker %s: re-attach: %w: %w", w.opts.ID, ErrRefused, err)
	}
	if err != nil {
		return fmt.Errorf("worker %s: re-attach: %w", w.opts.ID, err)
	}
	for _, g := range grants {
		run, found, err := w.opts.Executor.Reattach(ctx, g)
		if err != nil || !found {
			run = nil
		}
		w.mu.Lock()
		h := w.mu.core.Reattached(g, run)
		w.mu.Unlock()
		if run == nil {
			o := Lost(err)
			w.log().Warn().Uint64("lease", g.Lease).Str("job", g.Job.ID).Str("reason", o.Reason).Msg("lease lost on restart")
			w.leases.Go(func() { w.report(ctx, h, o) })
			continue
		}
		w.log().Info().Uint64("lease", g.Lease).Str("job", g.Job.ID).Msg("re-attached")
		w.await(ctx, h)
	}
	return nil
}

// start takes a lease granted to an acquire sent at sent, and runs its job
// unless the grant came too late.
func (w *Worker) start(ctx context.Context, g api.Grant, sent time.Time) {
	w.mu.Lock()
	h, ok := w.mu.core.Take(g, sent, w.now())
	w.mu.Unlock()
	w.begin(ctx, h, ok)
}

// begin runs the job of a lease just taken, or reports it too late (!ok).
//
// A nil h is a grant of a lease the worker holds or held already (Take):
// nothing to begin.
func (w *Worker) begin(ctx context.Context, h *Held, ok bool) {
	if h == nil {
		return
	}
	g := h.Grant()
	if !ok {
		w.log().Warn().Uint64("lease", g.Lease).Str("job", g.Job.ID).Msg("the grant arrived past the fence: not starting the job")
		w.leases.Go(func() { w.report(ctx, h, TooLate()) })
		return
	}
	w.run(ctx, h)
}

// run starts the job of a lease and tells the daemon it started.
func (w *Worker) run(ctx context.Context, h *Held) {
	g := h.Grant()
	if err := w.launch(ctx, h); err != nil {
		w.leases.Go(func() { w.report(ctx, h, NotStarted(err)) })
		return
	}
	if !Running(g) { // else started with its grant: the daemon knows
		w.leases.Go(func() { w.tellStarted(ctx, g.Lease) })
	}
	w.await(ctx, h)
}

// launch starts the job of a lease and gives its supervisor its deadline;
// an error is the executor's: the job did not start.
func (w *Worker) launch(ctx context.Context, h *Held) error {
	g := h.Grant()
	run, err := w.opts.Executor.Start(ctx, g)
	if err != nil {
		w.log().Warn().Err(err).Uint64("lease", g.Lease).Str("job", g.Job.ID).Msg("job could not start")
		return err
	}
	w.fenceMu.Lock()
	w.mu.Lock()
	stop := w.mu.core.Started(h, run, w.now())
	d, push := w.mu.core.Deadline(h)
	w.mu.Unlock()
	if push {
		d.Run.Fence(d.At)
	}
	w.fenceMu.Unlock()
	if stop {
		run.Stop(true)
	}
	w.log().Info().Uint64("lease", g.Lease).Str("job", g.Job.ID).Msg("job started")
	return nil
}

// tellStarted tells the daemon the job of lease started, until it answers;
// a refusal stops the job.
func (w *Worker) tellStarted(ctx context.Context, lease uint64) {
	err := w.retry(ctx, "start", func(ctx context.Context) error {
		_, err := w.opts.Daemon.Start(ctx, w.opts.ID, lease)
		return err
	})
	if err != nil && ctx.Err() == nil {
		// Fenced off (stale, or not ours): the job must not run on.
		w.log().Warn().Err(err).Uint64("lease", lease).Msg("start refused; stopping the job")
		w.drop(lease)
	}
}

// await waits for a run to end, then reports it.
func (w *Worker) await(ctx context.Context, h *Held) {
	w.leases.Go(func() {
		select {
		case <-h.run.Done():
		case <-ctx.Done():
			return // the job runs on; a restarted worker re-attaches
		}
		w.mu.Lock()
		o, report := w.mu.core.Ended(h)
		w.mu.Unlock()
		if !report {
			w.forget(h)
			return
		}
		w.report(ctx, h, o)
	})
}

// report sends a job's outcome until the daemon answers for good. Reports
// are idempotent, so a retry after a lost answer is safe. A refusal never
// makes the worker forget the lease by itself: Refused says what to send
// instead, and only a stale answer, a lease that is not the worker's, or a
// lost report refused even without its details end it.
func (w *Worker) report(ctx context.Context, h *Held, o Outcome) {
	g := h.Grant()
	later := w.backoff()
	// probe is set for the one call sent without next after a call with it
	// was refused as bad input: if that one is taken, the daemon predates
	// next and refused the field, not the report.
	probe := false
	for {
		r := api.Report{Worker: w.opts.ID, Outcome: o.Outcome, Ref: o.Ref, Reason: o.Reason, Result: o.Result}
		ask := 0 // leases the report asks for in the same call
		if w.rounds != nil && !w.noNext.Load() && !w.cut.Load() && !probe {
			w.mu.Lock()
			ask = w.mu.core.NextAfter(h)
			w.mu.Unlock()
		}
		var reply api.ReportReply
		var sent time.Time
		err := w.retry(ctx, "report", func(ctx context.Context) error {
			var err error
			sent = w.now()
			if ask > 0 {
				reply, err = w.rounds.ReportNext(ctx, g.Lease, r, api.Next{Max: ask, Offer: w.opts.Offer})
			} else {
				reply, err = w.opts.Daemon.Report(ctx, g.Lease, r)
			}
			return err
		})
		if ctx.Err() != nil {
			if ask > 0 {
				w.cut.Store(true) // its next may have been granted
			}
			return // not reported: the lease stays, and a restarted worker reports it
		}
		if probe && err == nil {
			w.log().Warn().Msg("the daemon takes no next acquire in a report; taking jobs with the acquire loop only")
			w.noNext.Store(true)
		}
		probe = false
		if err == nil {
			w.log().Info().Uint64("lease", g.Lease).Str("job", g.Job.ID).Str("outcome", o.Outcome).Uint64("seq", reply.Seq).Msg("reported")
			if ask > 0 {
				w.reportedNext(ctx, h, reply, sent)
				return
			}
			break
		}
		if ask > 0 && api.IsCode(err, api.CodeBadRequest) {
			// Bad input wrote nothing. Either the report is bad, or the
			// daemon predates next and refuses the field: the same report
			// without it tells them apart.
			probe = true
			continue
		}
		next, do := Refused(o, err)
		warn := func() *zerolog.Event {
			return w.log().Warn().Err(err).Uint64("lease", g.Lease).Str("job", g.Job.ID).Str("outcome", o.Outcome)
		}
		switch do {
		case Resend:
			warn().Str("next", next.Outcome).Msg("report refused; sending it again without what the daemon may object to")
			o = next
			continue
		case Later:
			warn().Msg("report refused for now; sending it again later")
			sleep(ctx, later.Next())
			continue
		case Expire:
			w.log().Error().Err(err).Uint64("lease", g.Lease).Str("job", g.Job.ID).
				Msg("lost report refused even without details; leaving the lease to expire, which the daemon folds the same way")
		case Final:
			if api.IsCode(err, api.CodeStaleLease) {
				warn().Msg("report refused as stale; kept by the daemon for auditors")
			} else {
				warn().Msg("report refused: the lease is not this worker's; forgetting it")
			}
		}
		break
	}
	w.forget(h)
}

// reportedNext lets go of h, reported by a call sent at sent that carried
// the next acquire, and takes and runs what that acquire granted, in the
// slot h freed. An answer without Next repeats an earlier one (the call was
// sent again after an answer was lost, or the network sent it twice): the
// earlier call's grants, if any, went to no one, so the worker looks for
// them in its lease list before it frees the slot, as after a lost acquire
// (adoptOrphans).
func (w *Worker) reportedNext(ctx context.Context, h *Held, reply api.ReportReply, sent time.Time) {
	var grants []api.Grant
	if reply.Next != nil {
		grants = reply.Next.Leases
	}
	now := w.now()
	w.mu.Lock()
	w.mu.core.Forget(h)
	taken := make([]*Held, len(grants))
	ok := make([]bool, len(grants))
	for i, g := range grants {
		taken[i], ok[i] = w.mu.core.Take(g, sent, now)
	}
	w.mu.Unlock()
	if reply.Next == nil {
		w.adoptOrphans(ctx)
	}
	select {
	case w.freed <- struct{}{}:
	default:
	}
	for i := range taken {
		w.begin(ctx, taken[i], ok[i])
	}
}

func (w *Worker) forget(h *Held) {
	w.mu.Lock()
	w.mu.core.Forget(h)
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
	stop, forget := w.mu.core.Drop(lease, CauseRefused)
	w.mu.Unlock()
	w.apply([]Stop{stop}, []*Held{forget})
}

// apply carries out the Core's decisions: stop runs, forget leases.
func (w *Worker) apply(stops []Stop, forget []*Held) {
	for _, s := range stops {
		if s.Run != nil {
			s.Run.Stop(s.Kill)
		}
	}
	for _, h := range forget {
		if h != nil {
			w.forget(h)
		}
	}
}

// retry calls f, each time with a deadline, until it succeeds, fails for
// good (a 4xx), or ctx ends.
func (w *Worker) retry(ctx context.Context, what string, f func(context.Context) error) error {
	b := w.backoff()
	for attempt := 1; ; attempt++ {
		callCtx, cancel := context.WithTimeout(ctx, w.callTimeout(0))
		err := f(callCtx)
		cancel()
		if err == nil || !Retry(err) || ctx.Err() != nil {
			return err
		}
		wait := b.Next()
		w.log().Warn().Err(err).Str("call", what).Int("attempt", attempt).Float64("retry_in_seconds", wait.Seconds()).
			Msg("call failed; retrying")
		sleep(ctx, wait)
	}
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
