package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/ops"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/replay"
	"github.com/leaselog/leaselog/worker"
)

// daemon is the simulated `leaselog serve`: the real lease.Service on a real
// Pebble store on a crashable in-memory filesystem, its clock the global
// clock. Requests are handled the instant they arrive, one at a time, as the
// service's mutex would order them; the worker API goes through ops.Daemon,
// the adapter the built-in worker uses, and the answers to the others are
// package ops's too. An acquire with nothing to grant is parked until a job
// is queued or its wait ends, as Service.AcquireWait does.
//
// Its clock is the service's own (docs/design.md §4): the wall clock read at open,
// then its host's boottime clock's count since (wallstep.go).
//
// Faults: a sleep (the process stopped: nothing is handled and the sweeper
// does not tick; requests wait in the socket until it wakes, then the first
// sweep runs before them) and a crash (the store keeps what was synced and a
// drawn share of what was not; connections are reset; a restart replays the
// log).
type daemon struct {
	s      *Sim
	fs     *vfs.MemFS
	log    *eventlog.Log
	svc    *lease.Service
	api    worker.Daemon
	up     bool
	asleep bool

	sleptAt    time.Duration
	hostSleep  bool          // the sleep is its host's suspend: absence however short
	wallOffset time.Duration // the wall clock's steps so far (wallstep.go)
	crashAt    time.Duration
	preCrash   []byte  // the table's snapshot when it crashed
	inbox      []*call // requests that arrived while asleep
	parked     []*parked
	dueMissed  bool // a job came due while the daemon slept: wake its parked acquires when it wakes
	sweepGen   int  // a sleep or a crash cancels the sweeps scheduled before it
	crashes    int
}

type parked struct {
	c        *call
	req      reqAcquire
	deadline time.Duration
}

// bootClock is the daemon's host's CLOCK_BOOTTIME: the global clock.
type bootClock struct{ s *Sim }

func (c bootClock) Now() time.Time { return c.s.wallNow() }

// monoClock is the daemon's host's CLOCK_MONOTONIC: the boottime clock less
// the suspends of its host (the local worker's, when there is one).
type monoClock struct{ s *Sim }

func (c monoClock) Now() time.Time {
	if w := c.s.workers; len(w) > 0 && w[0].mach.monotonic {
		return c.s.wallNow().Add(-w[0].mach.stood())
	}
	return c.s.wallNow()
}

// wallClock is the daemon's host's wall clock: the global clock, stepped.
type wallClock struct{ d *daemon }

func (c wallClock) Now() time.Time { return c.d.s.wallNow().Add(c.d.wallOffset) }

var bg = context.Background()

func openDaemon(s *Sim) (*daemon, error) {
	d := &daemon{s: s, fs: vfs.NewCrashableMem()}
	s.daemon = d
	if err := d.open(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *daemon) open() error {
	log, err := eventlog.Open("data", eventlog.Options{FS: d.fs, Logger: zerolog.Nop(), SegmentHeartbeats: d.s.compact.segment,
		OnFatal: func(msg string) { panic("sim: pebble fatal: " + msg) }})
	if err != nil {
		return fmt.Errorf("sim: open the log: %w", err)
	}
	before := log.LastSeq()
	seed := [32]byte{}
	for i := range seed {
		seed[i] = byte(d.s.rng.Uint32())
	}
	opts := lease.Options{Config: leaseConfig(), Wall: wallClock{d}, Boot: bootClock{d.s}, Mono: monoClock{d.s}, Entropy: rand.NewChaCha8(seed),
		Logger: zerolog.Nop(), SnapshotEvery: 40, HeartbeatRetention: d.s.compact.retention, Bounds: ownBounds()}
	switch d.s.brk.name {
	case "wall-deadlines":
		opts.Clock = wallClock{d} // deadlines on the wall clock, as it steps
	case "sleep-unseen":
		opts.Mono = opts.Boot // the host's sleeps go unseen unless past grace
	}
	svc, err := lease.Open(log, opts)
	if err != nil {
		_ = log.Close()
		return fmt.Errorf("sim: open the service: %w", err)
	}
	d.log, d.svc, d.api, d.up = log, svc, ops.NewDaemon(svc), true
	d.s.tracef("daemon: open (seq %d)", log.LastSeq())
	d.s.check.opened(before)
	d.scheduleSweep(leaseConfig().SweepEvery())
	// The timers of the life before are gone with it, and its clock may
	// differ from this one's: the jobs not yet due get new ones.
	js, err := svc.Jobs(bg, projection.JobFilter{State: fsm.Queued})
	if err != nil {
		return fmt.Errorf("sim: list the queued jobs: %w", err)
	}
	now := int64(d.s.now) + d.s.hist.clock
	for _, j := range js {
		if j.NotBefore > now {
			d.dueAfter(time.Duration(j.NotBefore - now))
		}
	}
	return nil
}

func (d *daemon) close() {
	if d.up {
		_ = d.log.Close()
		d.up = false
	}
}

func (d *daemon) scheduleSweep(after time.Duration) {
	gen := d.sweepGen
	d.s.after(after, func() {
		if gen != d.sweepGen || !d.up || d.asleep {
			return
		}
		d.sweep()
		d.scheduleSweep(leaseConfig().SweepEvery())
	})
}

// sweep is one tick of the sweeper.
func (d *daemon) sweep() {
	before := d.log.LastSeq()
	if err := d.svc.Sweep(); err != nil {
		d.s.fail("sweep: %v", err)
		return
	}
	d.stepped("sweep", before)
	d.s.hist.sweep(d.s.now, d.s.check.eventsSince(before))
	d.s.check.silentExpired()
	d.compactAfterSweep()
}

// receive is a request arriving.
func (d *daemon) receive(c *call) {
	switch {
	case !d.up:
		d.s.net.reply(c, nil, nil, errRefused)
	case d.asleep:
		d.inbox = append(d.inbox, c)
	default:
		d.handle(c)
	}
}

func (d *daemon) handle(c *call) {
	before := d.log.LastSeq()
	var reply any
	var err error
	switch r := c.req.(type) {
	case reqHeartbeat:
		reply, err = d.api.Heartbeat(bg, r.worker, r.leases)
		d.s.check.heartbeat(r, reply, err, before)
	case reqAcquire:
		var gs []api.Grant
		gs, err = d.acquire(r)
		if err == nil && len(gs) == 0 && r.wait > 0 {
			p := &parked{c: c, req: r, deadline: d.s.now + r.wait}
			d.parked = append(d.parked, p)
			d.s.after(r.wait, func() { d.unpark(p, nil) })
			d.stepped("acquire (parked)", before)
			return
		}
		reply = gs
	case reqStart:
		reply, err = d.api.Start(bg, r.worker, r.lease)
		d.s.check.start(r, err, before)
	case reqReport:
		views := d.s.check.views()
		reply, err = d.api.Report(bg, r.lease, r.r)
		d.s.check.report(r, views, reply, err)
	case reqWorkerLeases:
		reply, err = d.api.WorkerLeases(bg, r.worker)
	case reqSubmit:
		kind, _ := event.ParseKind(r.jobKind)
		it := lease.SubmitItem{ID: r.job, Kind: kind, Spec: []byte(r.spec), Priority: r.sched.priority}
		it.Labels = event.MustLabels(r.sched.labels)
		if r.sched.delay > 0 {
			it.NotBefore = time.Unix(0, int64(d.s.now)+d.s.hist.clock+int64(r.sched.delay))
		}
		if r.namesCap {
			it.MaxRequeues = &r.maxRequeues
		}
		it.Timing = r.sched.timing
		j, created, e := d.svc.SubmitItem(bg, it)
		reply, err = submitted{job: ops.JobOf(j, nil), created: created}, apiErr(e)
	case reqRevoke:
		f := d.svc.Cancel
		if r.kill {
			f = d.svc.Kill
		}
		if _, err = f(bg, r.job); err == nil {
			reply, err = d.job(r.job)
		}
		err = apiErr(err)
	case reqJob:
		reply, err = d.job(r.job)
	}
	if err != nil {
		reply = nil
	}
	d.answer(c, reply, err, before)
	d.stepped(c.req.kind(), before)
}

// acquire is one try of an acquire, without waiting; with start, through
// the adapter's AcquireStart.
func (d *daemon) acquire(r reqAcquire) ([]api.Grant, error) {
	if r.start {
		return d.api.(interface {
			AcquireStart(context.Context, string, int, time.Duration) ([]api.Grant, error)
		}).AcquireStart(bg, r.worker, r.max, 0)
	}
	switch d.s.brk.name {
	case "offer-dropped":
		r.offer = api.Offer{}
	case "labels-dropped":
		r.offer.Labels = nil
	}
	return d.api.(worker.Router).AcquireOffer(bg, r.worker, r.max, 0, r.offer)
}

// job is job id as the API shows it, with its live lease.
func (d *daemon) job(id string) (api.Job, error) {
	j, err := ops.Job(bg, d.svc, id)
	return j, apiErr(err)
}

func apiErr(err error) error {
	if err == nil {
		return nil
	}
	return ops.ErrorOf(err)
}

// answer records the processing (and whether it appended anything since
// seq before) and sends the reply.
func (d *daemon) answer(c *call, reply any, err error, before uint64) {
	p := d.s.hist.processed(c, d.s.now, reply, err, d.log.LastSeq() != before)
	d.s.net.reply(c, p, reply, err)
}

// stepped runs the checks after a step of the daemon, and wakes parked
// acquires if a job was queued.
func (d *daemon) stepped(what string, before uint64) {
	evs := d.s.check.afterDaemon(what, before)
	queued := false
	for _, e := range evs {
		if e.Type == event.TypeQueued {
			queued = true
			if e.NotBefore > e.Time {
				d.dueAfter(time.Duration(e.NotBefore - e.Time))
			}
		}
	}
	if queued {
		d.retryParked()
	}
}

// dueAfter wakes the parked acquires after dur, when a job comes due, as the
// long poll's timer does; if the daemon sleeps then, when it wakes.
func (d *daemon) dueAfter(dur time.Duration) {
	d.s.after(dur, func() {
		switch {
		case !d.up:
		case d.asleep:
			d.dueMissed = true
		default:
			d.retryParked()
		}
	})
}

func (d *daemon) retryParked() {
	for _, p := range slices.Clone(d.parked) {
		if d.s.err != nil || !slices.Contains(d.parked, p) {
			continue // a step below answered it already
		}
		before := d.log.LastSeq()
		gs, err := d.acquire(p.req)
		switch {
		case err != nil:
			d.unparked(p)
			d.answer(p.c, nil, err, before)
		case len(gs) > 0:
			d.unparked(p)
			d.answer(p.c, gs, nil, before)
		}
		// Even an acquire that grants nothing may record worker.reachable.
		d.stepped("acquire (woken)", before)
	}
}

func (d *daemon) unparked(p *parked) bool {
	i := slices.Index(d.parked, p)
	if i < 0 {
		return false
	}
	d.parked = slices.Delete(d.parked, i, i+1)
	return true
}

// unpark answers a parked acquire at its deadline (nothing was queued), or
// resets it (err).
func (d *daemon) unpark(p *parked, err error) {
	if err == nil && (!d.up || d.asleep) {
		return // answered when the daemon wakes (or reset if it crashes)
	}
	if !d.unparked(p) {
		return
	}
	if err != nil {
		d.s.net.reply(p.c, nil, nil, err)
		return
	}
	d.answer(p.c, []api.Grant{}, nil, d.log.LastSeq())
}

// sleep stops the daemon's process for dur: nothing is handled, the sweeper
// does not tick.
func (d *daemon) sleep(dur time.Duration, host bool) {
	d.s.stats.Sleeps++
	d.asleep, d.sleptAt, d.hostSleep = true, d.s.now, host
	d.s.check.uptime.stopped(d.s.now, true, false)
	d.sweepGen++
	gen := d.sweepGen // a crash and another sleep void this one's wake
	d.s.tracef("FAULT daemon sleeps for %v", dur)
	if w := d.s.localWorker(); w != nil && !host {
		w.stopsWithDaemon(dur)
	}
	d.s.after(dur, func() {
		if d.up && d.asleep && gen == d.sweepGen {
			d.wake()
		}
	})
}

// wake: the requests that waited and the sweeper's first tick race. Half
// the time the sweep goes first, half the time the requests do: then the
// first command that writes sees the gap itself, and records daemon.resumed
// before it touches a deadline (docs/design.md §4: every command checks for
// absence).
func (d *daemon) wake() {
	slept := d.s.now - d.sleptAt
	d.asleep = false
	d.s.check.uptime.started(d.s.now)
	sweepFirst := d.s.rng.IntN(2) == 0
	d.s.tracef("daemon wakes after %v (sweep first: %v)", slept, sweepFirst)
	// A gap past grace is absence; so is a suspend of the daemon's host,
	// however short (one its clocks can tell: a millisecond).
	absent := slept > grace || (d.hostSleep && slept >= time.Millisecond)
	d.s.check.absent(d.sleptAt, d.s.now, absent)
	if absent {
		d.s.check.expectResume(slept)
	}
	if sweepFirst {
		d.sweep()
	}
	inbox := d.inbox
	d.inbox = nil
	for _, c := range inbox {
		if d.s.err != nil {
			return
		}
		d.handle(c)
	}
	if !sweepFirst && d.s.err == nil {
		d.sweep()
	}
	if d.dueMissed && d.s.err == nil {
		d.dueMissed = false
		d.retryParked()
	}
	for _, p := range slices.Clone(d.parked) {
		if p.deadline <= d.s.now {
			d.unpark(p, nil)
		}
	}
	d.scheduleSweep(leaseConfig().SweepEvery())
}

// crash kills the daemon: the store keeps what was synced and pct% of what
// was not; connections are reset. It restarts after downtime.
func (d *daemon) crash(downtime time.Duration, pct int) {
	d.s.stats.Crashes++
	d.crashes++
	d.s.tracef("FAULT daemon crashes (unsynced kept: %d%%), down for %v", pct, downtime)
	snap := d.s.check.snapshot()
	clone, err := crashImage(d.fs, pct, rand.New(rand.NewPCG(d.s.rng.Uint64(), d.s.rng.Uint64())))
	if err != nil {
		d.s.fail("crash: %v", err)
		return
	}
	_ = d.log.Close()
	if d.asleep {
		d.s.check.absent(d.sleptAt, d.s.now, d.s.now-d.sleptAt > grace)
	}
	d.s.check.uptime.stopped(d.s.now, pct == 100, d.asleep)
	d.up, d.asleep, d.crashAt = false, false, d.s.now
	d.sweepGen++
	if w := d.s.localWorker(); w != nil {
		w.diesWithDaemon()
		w.mach.storeFreed()
	}
	for _, c := range d.inbox {
		d.s.net.reply(c, nil, nil, errRefused)
	}
	d.inbox = nil
	for _, p := range slices.Clone(d.parked) {
		d.unpark(p, errRefused)
	}
	d.fs, d.preCrash = clone, snap
	d.s.after(downtime, d.restart)
}

// restartLater: a restart waits for its suspended host to wake.
func (d *daemon) restartLater() bool {
	if m := d.s.workers[0].mach; m.daemonHost() {
		m.onWake = append(m.onWake, d.restart)
		return true
	}
	return false
}

// restart opens the crash image: what was acknowledged must all be there.
func (d *daemon) restart() {
	if d.up || d.restartLater() {
		return
	}
	before := d.preCrash
	log, err := eventlog.Open("data", eventlog.Options{FS: d.fs, Logger: zerolog.Nop()})
	if err != nil {
		d.s.fail("reopen after a crash: %v", err)
		return
	}
	rebuilt, _, err := replay.Rebuild(log, zerolog.Nop())
	_ = log.Close()
	if err != nil {
		d.s.fail("rebuild after a crash: %v", err)
		return
	}
	if !slices.Equal(rebuilt.Snapshot(), before) {
		d.s.fail("the table rebuilt after a crash differs from the one before it: an acknowledged event was lost\n--- rebuilt\n%s", rebuilt)
		return
	}
	d.s.check.absent(d.crashAt, d.s.now, true)
	d.s.check.uptime.started(d.s.now)
	if d.s.brk.name == "alive-unseen" {
		_ = d.fs.Remove("data/alive") // the start counts its absence from its last event
	}
	if err := d.open(); err != nil {
		d.s.fail("restart: %v", err)
		return
	}
	if w := d.s.localWorker(); w != nil {
		w.mach.storeTaken()
		if !w.alive {
			w.boot()
		}
	}
}

// heal ends a sleep or a crash now.
func (d *daemon) heal() {
	switch {
	case !d.up:
		d.restart()
	case d.asleep:
		d.wake()
	}
}
