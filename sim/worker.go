package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/worker"
)

// simWorker is a worker process. Its decisions are a worker.Core's; this
// file is only the driver, shaped like worker.Worker's goroutines — the
// re-attach, the heartbeat loop, the acquire loop, and per lease a start
// call and an await-then-report — with the simulator's events in place of
// goroutines and timers. Where Worker blocks on a call, the driver waits for
// the call's answer (or its timeout, where Worker has one).
//
// Its clock drifts: it runs at rate 1+drift against the global clock, and
// every duration the worker waits is on its own clock. A pause stops the
// process (its events wait; its jobs, separate processes, run on); a death
// ends the incarnation (its jobs run on unless the machine died with it), and
// a restart boots a new one that re-attaches.
type simWorker struct {
	s        *Sim
	idx      int
	id       string
	capacity int
	rate     float64
	mach     *machine

	inc      int // incarnation: events of an earlier one are void
	alive    bool
	paused   bool
	deferred []*action
	cutUntil time.Duration
	client   int // porcupine client id of this incarnation

	core       *worker.Core
	beatToken  int // the heartbeat loop's wait in progress
	waitToken  int // the acquire loop's wait in progress, 0 if none
	freed      bool
	acqBackoff *worker.Backoff
	// listing: a lease list for orphans is in flight; the next waits
	// (Worker.adoptMu: one list at a time, Core.ListMark).
	listing bool
	toAdopt []func()
}

func newSimWorker(s *Sim, i int) *simWorker {
	w := &simWorker{s: s, idx: i, id: fmt.Sprintf("w%d", i), capacity: s.p.capacity[i], rate: 1 + s.p.drift[i]}
	w.mach = newMachine(w)
	w.mach.monotonic = i == 0 && s.p.local
	return w
}

func (w *simWorker) name() string { return w.id }

// local is the worker's fence clock, its host's (drifting): CLOCK_BOOTTIME,
// or CLOCK_MONOTONIC for the local worker, which stands still while the
// host suspends.
func (w *simWorker) local() time.Time {
	return clocktest.Epoch.Add(time.Duration(float64(w.s.now-w.mach.stood()) * w.rate))
}

// global is how long a wait of d on the worker's clock takes on the global one.
func (w *simWorker) global(d time.Duration) time.Duration {
	return time.Duration(math.Ceil(float64(d) / w.rate))
}

// after runs fn for this incarnation once d has passed on the worker's clock.
func (w *simWorker) after(d time.Duration, fn func()) {
	w.s.push(&action{at: w.s.now + w.global(d), w: w, inc: w.inc, fn: fn})
}

func (w *simWorker) deliver(c *call, t time.Duration, fn func()) {
	w.s.push(&action{at: max(t, w.s.now), w: w, inc: c.inc, fn: fn})
}

func (w *simWorker) cut() bool { return w.s.now < w.cutUntil }

// call sends req; timeout is on the worker's clock, 0 for none (as Worker's
// calls without a deadline).
func (w *simWorker) call(req request, timeout time.Duration, done func(reply any, err error)) {
	brk := w.s.brk
	c := &call{from: w, inc: w.inc, req: req, client: w.client, done: func(reply any, err error) { done(brk.reply(reply), err) }}
	var t time.Duration
	if timeout > 0 {
		t = w.global(timeout)
	}
	w.s.net.send(c, t)
}

// boot starts a new incarnation: Worker.Run.
func (w *simWorker) boot() {
	w.inc++
	w.alive, w.paused, w.deferred = true, false, nil
	w.core = worker.NewCore(w.capacity, leaseConfig(), w.local())
	w.waitToken, w.beatToken, w.freed = 0, 0, false
	w.listing, w.toAdopt = false, nil
	w.acqBackoff = worker.NewBackoff(w.core.Renew(), nil)
	w.client = w.s.hist.newClient(fmt.Sprintf("%s#%d", w.id, w.inc))
	w.s.tracef("%s boots (incarnation %d, capacity %d, clock rate %.4f)", w.id, w.inc, w.capacity, w.rate)
	w.reattach()
}

// reattach is Worker.reattach, then the two loops start.
func (w *simWorker) reattach() {
	w.retry(func(done func(any, error)) { w.call(reqWorkerLeases{w.id}, w.core.CallTimeout(), done) }, func(reply any, err error) {
		if err != nil {
			w.s.tracef("%s: re-attach refused (%v): the worker exits", w.id, err)
			w.die(renew, false, false)
			return
		}
		for _, g := range reply.([]api.Grant) {
			run, found, _ := w.mach.Reattach(bg, g)
			if !found {
				run = nil
			}
			h := w.core.Reattached(g, run)
			if run == nil {
				w.s.tracef("%s: lease %d (%s) lost on restart", w.id, g.Lease, g.Job.ID)
				w.report(h, worker.Lost(nil))
				continue
			}
			w.s.tracef("%s: re-attached lease %d (%s)", w.id, g.Lease, g.Job.ID)
			w.await(h)
		}
		w.heartbeatStep()
		w.acquireStep()
	})
}

// heartbeatStep is one turn of Worker.heartbeatLoop: send a heartbeat if
// one is due (its answer wakes the loop), check the fence unless waking
// (Core.Turn), wait.
func (w *simWorker) heartbeatStep() {
	now := w.local()
	ids, due, fence := w.core.Turn(now)
	if due {
		w.call(reqHeartbeat{w.id, ids}, w.core.BeatTimeout(), func(reply any, err error) {
			if err != nil {
				w.core.Unacked()
			} else {
				a := w.core.Acked(now, w.local(), reply.(api.HeartbeatReply))
				for _, d := range a.Fence {
					d.Run.Fence(d.At)
				}
				w.apply(a.Stop, a.Forget)
				for _, h := range a.Start {
					w.s.tracef("%s: adopted lease %d renewed: starting its job", w.id, h.Lease())
					w.run(h)
				}
				for _, e := range a.Report {
					w.report(e.Held, e.Outcome)
				}
			}
			w.heartbeatStep() // the answer wakes the loop
		})
	}
	if fence {
		stops, fell, silent, _ := w.core.Fence(now)
		if fell {
			w.s.stats.Fenced++
			w.s.tracef("%s: FENCE falls (silent %v on its clock): stopping %d job(s)", w.id, silent, len(stops))
		}
		w.apply(stops, nil)
	}
	w.beatToken++
	tok := w.beatToken
	w.after(w.core.FenceEvery(), func() {
		if tok == w.beatToken {
			w.heartbeatStep()
		}
	})
}

// acquireStep is one turn of Worker.acquireLoop.
func (w *simWorker) acquireStep() {
	room := w.core.Room()
	if room <= 0 { // wait for a slot, or for the fence to lift
		if w.freed {
			w.freed = false
			w.after(0, w.acquireStep)
			return
		}
		w.waitToken++
		tok := w.waitToken
		w.after(w.core.Renew(), func() {
			if w.waitToken == tok {
				w.waitToken = 0
				w.acquireStep()
			}
		})
		return
	}
	sent := w.local()
	w.call(reqAcquire{w.id, room, acquireWait, false, w.s.route.offers[w.idx]}, w.core.AcquireTimeout(acquireWait), func(reply any, err error) {
		if err != nil {
			w.after(w.acqBackoff.Next(), func() {
				if worker.Retry(err) {
					w.adoptOrphans(w.acquireStep)
					return
				}
				w.acquireStep()
			})
			return
		}
		w.acqBackoff.Reset()
		for _, g := range reply.([]api.Grant) {
			w.start(g, sent)
		}
		w.acquireStep()
	})
}

// adoptOrphans is Worker.adoptOrphans; then continues with then (the
// acquire loop, or a report's next). One list at a time, as adoptMu makes
// them.
func (w *simWorker) adoptOrphans(then func()) {
	if w.listing {
		w.toAdopt = append(w.toAdopt, func() { w.adoptOrphans(then) })
		return
	}
	w.listing = true
	mark := w.core.ListMark()
	w.call(reqWorkerLeases{w.id}, w.core.CallTimeout(), func(reply any, err error) {
		if err == nil {
			for _, g := range w.core.Orphans(reply.([]api.Grant), mark) {
				w.s.tracef("%s: adopting lease %d (%s), whose grant was lost", w.id, g.Lease, g.Job.ID)
				w.core.Adopt(g)
			}
		}
		w.listing = false
		then()
		if len(w.toAdopt) > 0 && !w.listing {
			next := w.toAdopt[0]
			w.toAdopt = w.toAdopt[1:]
			next()
		}
	})
}

// start is Worker.start.
func (w *simWorker) start(g api.Grant, sent time.Time) {
	h, ok := w.core.Take(g, sent, w.local())
	w.begin(h, ok)
}

// begin is Worker.begin.
func (w *simWorker) begin(h *worker.Held, ok bool) {
	if h == nil {
		w.s.tracef("%s: a grant of a lease it holds or held already: nothing to begin", w.id)
		return
	}
	g := h.Grant()
	if !ok {
		w.s.tracef("%s: the grant of lease %d (%s) arrived past the fence: not starting it", w.id, g.Lease, g.Job.ID)
		w.report(h, worker.TooLate())
		return
	}
	w.run(h)
}

// run is Worker.run.
func (w *simWorker) run(h *worker.Held) {
	g := h.Grant()
	run, err := w.mach.Start(bg, g)
	if err != nil {
		w.report(h, worker.NotStarted(err))
		return
	}
	if w.core.Started(h, run, w.local()) {
		run.Stop(true)
	} else if d, ok := w.core.Deadline(h); ok {
		run.Fence(d.At)
	}
	if worker.Running(g) { // started with its grant
		w.await(h)
		return
	}
	w.retry(func(done func(any, error)) { w.call(reqStart{w.id, g.Lease}, w.core.CallTimeout(), done) }, func(_ any, err error) {
		if err != nil { // fenced off (stale, or not ours): the job must not run on
			stop, forget := w.core.Drop(g.Lease, worker.CauseRefused)
			w.apply([]worker.Stop{stop}, []*worker.Held{forget})
		}
	})
	w.await(h)
}

// await is Worker.await: once the run is over, report it (or forget it).
func (w *simWorker) await(h *worker.Held) {
	inc := w.inc
	h.Run().(*simRun).onDone(func() {
		w.s.push(&action{at: w.s.now, w: w, inc: inc, fn: func() {
			o, report := w.core.Ended(h)
			if !report {
				w.forget(h)
				return
			}
			w.report(h, o)
		}})
	})
}

// report is Worker.report: until the daemon answers for good, then forget.
// A refusal is worker.Refused's to settle: send again with less, later, or
// forget (stale, not ours, or a lost report refused: left to expire).
func (w *simWorker) report(h *worker.Held, o worker.Outcome) {
	g := h.Grant()
	later := worker.NewBackoff(w.core.Renew(), nil)
	var send func(o worker.Outcome)
	send = func(o worker.Outcome) {
		o = w.s.brk.outcome(o)
		r := api.Report{Worker: w.id, Outcome: o.Outcome, Ref: o.Ref, Reason: o.Reason, Result: o.Result}
		// As the worker (Worker.report): the next acquire in the report.
		if ask := w.core.NextAfter(h); ask > 0 {
			r.Next = &api.Next{Max: ask, Offer: w.s.route.offers[w.idx]}
		}
		var sent time.Time
		w.retry(func(done func(any, error)) {
			sent = w.local()
			w.call(reqReport{g.Lease, r}, w.core.CallTimeout(), done)
		}, func(reply any, err error) {
			if err == nil {
				w.s.accepted[g.Job.ID] = sentReport{lease: g.Lease, r: r}
			}
			if err == nil && r.Next != nil {
				w.reportedNext(h, reply.(api.ReportReply), sent)
				return
			}
			if err == nil {
				w.forget(h)
				return
			}
			next, do := worker.Refused(o, err)
			switch do {
			case worker.Resend:
				send(next)
			case worker.Later:
				w.after(later.Next(), func() { send(o) })
			default:
				w.forget(h)
			}
		})
	}
	send(o)
}

// reportedNext is Worker.reportedNext.
func (w *simWorker) reportedNext(h *worker.Held, reply api.ReportReply, sent time.Time) {
	var grants []api.Grant
	if reply.Next != nil {
		grants = reply.Next.Leases
	}
	now := w.local()
	w.core.Forget(h)
	taken := make([]*worker.Held, len(grants))
	ok := make([]bool, len(grants))
	for i, g := range grants {
		taken[i], ok[i] = w.core.Take(g, sent, now)
	}
	then := func() {
		w.freeSlot()
		for i := range taken {
			w.begin(taken[i], ok[i])
		}
	}
	if reply.Next == nil {
		w.s.tracef("%s: the report of lease %d was answered as a repeat: looking for the grants of a lost answer", w.id, h.Lease())
		w.adoptOrphans(then)
		return
	}
	then()
}

// forget is Worker.forget: a slot is free, the acquire loop may go on.
func (w *simWorker) forget(h *worker.Held) {
	w.core.Forget(h)
	w.freeSlot()
}

// freeSlot wakes the acquire loop if it waits for a slot.
func (w *simWorker) freeSlot() {
	if w.waitToken != 0 {
		w.waitToken = 0
		w.after(0, w.acquireStep)
		return
	}
	w.freed = true
}

// apply carries out the Core's decisions.
func (w *simWorker) apply(stops []worker.Stop, forget []*worker.Held) {
	for _, st := range stops {
		if st.Run == nil {
			continue
		}
		w.s.tracef("%s: stop lease %d (%s, kill=%v)", w.id, st.Lease, st.Why, st.Kill)
		w.s.brk.stop(w, st)
	}
	for _, h := range forget {
		if h != nil {
			w.forget(h)
		}
	}
}

// retry is Worker.retry: send until answered, or refused for good.
func (w *simWorker) retry(send func(done func(any, error)), final func(any, error)) {
	b := worker.NewBackoff(w.core.Renew(), nil)
	var try func()
	try = func() {
		send(func(reply any, err error) {
			if err == nil || !worker.Retry(err) {
				final(reply, err)
				return
			}
			w.after(b.Next(), try)
		})
	}
	try()
}

// fenceAt is when, on the global clock, the worker's fence next falls for a
// running job if no heartbeat renews its lease before.
func (w *simWorker) fenceAt() (time.Duration, bool) {
	at, ok := w.core.NextFence()
	if !ok {
		return 0, false
	}
	return w.s.now + w.global(at.Sub(w.local())), true
}

// pause stops the process for d; its jobs and their supervisors run on.
func (w *simWorker) pause(d time.Duration) {
	w.paused = true
	if d > pauseBound {
		w.s.stats.LongPauses++
	}
	w.s.tracef("FAULT %s pauses for %v", w.id, d)
	w.s.after(d, w.resume)
}

func (w *simWorker) resume() {
	if !w.paused {
		return
	}
	w.paused = false
	w.s.tracef("%s resumes", w.id)
	w.thaw()
}

// frozen: the worker's events wait, its process paused or its host asleep.
func (w *simWorker) frozen() bool { return w.paused || w.mach.suspended }

// thaw runs the events that waited, once nothing holds the worker any more.
func (w *simWorker) thaw() {
	if w.frozen() || len(w.deferred) == 0 {
		return
	}
	w.s.tracef("%s: %d events waited", w.id, len(w.deferred))
	for _, e := range w.deferred {
		e.at = w.s.now
		w.s.push(e)
	}
	w.deferred = nil
}

// die ends the incarnation; down is how long until it boots again. The
// machine may die with it (its jobs die at once, and wipe loses their run
// directories); a job that survives runs on under its supervisor, which
// kills it at its deadline unless a new incarnation re-attaches and renews
// it first. wipe, when the machine lives, removes one run directory.
func (w *simWorker) die(down time.Duration, machine, wipe bool) {
	if !w.alive {
		return
	}
	w.s.stats.Deaths++
	w.alive, w.paused, w.deferred = false, false, nil
	w.inc++
	w.s.tracef("FAULT %s dies (machine too: %v, run directories wiped: %v); restarts in %v", w.id, machine, wipe, down)
	if machine {
		w.mach.crash(wipe)
	} else if wipe {
		w.mach.removeDir()
	}
	w.s.after(down, w.restart)
}

// restart boots a dead worker, once its host is awake.
func (w *simWorker) restart() {
	switch {
	case w.alive:
	case w.inDaemon() && !w.s.daemon.up: // the daemon's restart boots it
	case w.mach.suspended:
		w.mach.onWake = append(w.mach.onWake, w.restart)
	default:
		w.boot()
	}
}

// heal: a suspended host wakes, a paused worker resumes, a dead one boots.
func (w *simWorker) heal() {
	w.cutUntil = 0
	w.mach.wake()
	switch {
	case !w.alive:
		w.boot()
	case w.paused:
		w.resume()
	}
}
