package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/worker"
)

// machine is a worker's host and its executor: the jobs it runs are separate
// processes that outlive the worker's process (as worker/local's are), each
// under its own supervisor that holds the job's fence deadline and kills the
// job when it passes on the host's clock, whether the worker is alive, dead
// or paused — a deadline that the local worker's supervisors move by the
// time no daemon held the store (localworker.go). The runs' records (run
// directories) outlive the worker, unless wiped. It implements
// worker.Executor.
//
// The host may suspend: the worker, the supervisors and the jobs freeze, and
// the host's clock (CLOCK_BOOTTIME, which the fence runs on) counts the
// suspend. On wake every supervisor checks its deadline first, before its job
// does anything (see wake).
type machine struct {
	w    *simWorker
	runs map[uint64]*simRun // by lease: what Reattach finds

	suspended   bool
	suspendedAt time.Duration
	onWake      []func() // what waits for the host to wake (a worker's restart)

	// monotonic: the daemon's own host, whose fence clock is CLOCK_MONOTONIC
	// (hostclock.For): it stands still while the host suspends, for the
	// daemon sleeps then too, and its absence counts against nobody.
	monotonic bool
	slept     time.Duration // how long the host has been suspended, in all
}

var _ worker.Executor = (*machine)(nil)

func newMachine(w *simWorker) *machine { return &machine{w: w, runs: make(map[uint64]*simRun)} }

// clock is the host's fence clock: CLOCK_BOOTTIME, drifting at the worker's
// rate, counting a suspend (or CLOCK_MONOTONIC on the daemon's host). The
// worker and the supervisors read it alike.
func (m *machine) clock() time.Time { return m.w.local() }

// daemonHost: this is the daemon's host, suspended now: nothing of the
// daemon runs either (it neither crashes nor restarts).
func (m *machine) daemonHost() bool { return m.monotonic && m.suspended }

// stood is how much of the global clock the fence clock has not counted:
// the suspends of a monotonic host.
func (m *machine) stood() time.Duration {
	if !m.monotonic {
		return 0
	}
	d := m.slept
	if m.suspended {
		d += m.w.s.now - m.suspendedAt
	}
	return d
}

// globalAt is when, on the global clock, the host's clock reads t (if the
// host does not suspend before).
func (m *machine) globalAt(t time.Time) time.Duration {
	return time.Duration(math.Ceil(float64(t.Sub(clocktest.Epoch))/m.w.rate)) + m.stood()
}

// Start starts the job of g under a supervisor: it runs from now until it
// ends on its own or a stop takes effect. A few checkouts fail.
func (m *machine) Start(_ context.Context, g api.Grant) (worker.Run, error) {
	s := m.w.s
	if s.rng.Float64() < 0.02 {
		s.tracef("%s: job %s (lease %d) could not start", m.w.id, g.Job.ID, g.Lease)
		return nil, errors.New("checkout failed")
	}
	r := &simRun{m: m, lease: g.Lease, job: g.Job.ID, start: s.now, done: make(chan struct{}), endAt: -1, checkAt: -1}
	// The supervisor polls its deadline every superEvery, on a phase of its own.
	r.phase = time.Duration(s.rng.Int64N(int64(superEvery)))
	m.runs[g.Lease] = r
	// Short, medium and long jobs: the long ones outlast the fence, so
	// that fences, expiries and re-grants meet running jobs.
	var d time.Duration
	switch n := s.rng.IntN(10); {
	case n < 4:
		d = time.Duration(s.rng.Int64N(int64(3 * renew)))
	case n < 8:
		d = 3*renew + time.Duration(s.rng.Int64N(int64(20*time.Second-3*renew)))
	default:
		d = 20*time.Second + time.Duration(s.rng.Int64N(int64(maxJob-20*time.Second)))
	}
	o := worker.Outcome{Outcome: "succeeded", Ref: fmt.Sprintf("refs/leaselog/%s/%d", g.Job.ID, g.Lease), Result: []byte(`{"score":1}`)}
	if s.rng.IntN(4) == 0 {
		o = worker.Outcome{Outcome: "failed", Reason: "exit status 1"}
	}
	r.endIn(d, o)
	s.tracef("%s: job %s STARTS (lease %d), runs %v unless stopped", m.w.id, g.Job.ID, g.Lease, d)
	s.check.runStarted(r)
	return r, nil
}

// Reattach finds the run of a lease after the worker restarted. A job
// whose run directory is gone is not found; if it still runs, it is killed
// first (as worker/local does, through its supervisor), so that the loss is
// reported once it has stopped.
func (m *machine) Reattach(_ context.Context, g api.Grant) (worker.Run, bool, error) {
	r := m.runs[g.Lease]
	if r == nil {
		return nil, false, nil
	}
	if r.dirGone {
		delete(m.runs, g.Lease)
		if !r.ended {
			m.w.s.tracef("%s: lease %d's run directory is gone: its job is killed", m.w.id, g.Lease)
			r.gen++
			r.finish(worker.Outcome{Outcome: "lost", Reason: "run directory gone"}, m.w.s.now)
		}
		return nil, false, nil
	}
	return r, true, nil
}

// removeDir removes the run directory of one of the host's runs (someone
// cleans up while the worker is down); its job runs on.
func (m *machine) removeDir() {
	ids := slices.Sorted(maps.Keys(m.runs))
	if len(ids) == 0 {
		return
	}
	r := m.runs[ids[m.w.s.rng.IntN(len(ids))]]
	r.dirGone = true
	m.w.s.tracef("FAULT %s: lease %d's run directory is removed", m.w.id, r.lease)
}

// crash: the machine died with the worker. Its jobs die now; wipe loses
// their run directories too.
func (m *machine) crash(wipe bool) {
	for _, id := range slices.Sorted(maps.Keys(m.runs)) {
		r := m.runs[id]
		if !r.ended {
			r.endIn(0, worker.Outcome{Outcome: "failed", Reason: "the job's process vanished"})
		}
	}
	if wipe {
		clear(m.runs)
	}
}

// suspend freezes the host for d: the worker's events wait, the jobs stand
// still (what is left of each one's time, and of a stop under way, resumes
// on wake), the supervisors do not check.
func (m *machine) suspend(d time.Duration) {
	s := m.w.s
	s.stats.Suspends++
	m.suspended, m.suspendedAt = true, s.now
	s.tracef("FAULT %s's host suspends for %v", m.w.id, d)
	for _, id := range slices.Sorted(maps.Keys(m.runs)) {
		if r := m.runs[id]; !r.ended {
			r.freeze()
		}
	}
	s.check.suspended(m)
	s.after(d, m.wake)
}

// wake ends a suspend. Each supervisor checks its deadline at the wake
// instant, before its job does anything: a job whose deadline passed while
// the host slept is killed without having run again (its execution ends at
// the suspend). This idealises the real window between the wake and the
// supervisor's first check, which is as short as the kernel makes it (the
// supervisor's timer is the first thing due) but not zero.
func (m *machine) wake() {
	if !m.suspended {
		return
	}
	s := m.w.s
	m.suspended, m.slept = false, m.slept+s.now-m.suspendedAt
	s.tracef("%s's host wakes after %v", m.w.id, s.now-m.suspendedAt)
	for _, id := range slices.Sorted(maps.Keys(m.runs)) {
		if r := m.runs[id]; !r.ended && r.frozen {
			r.thaw()
		}
	}
	s.check.woke(m)
	onWake := m.onWake
	m.onWake = nil
	for _, f := range onWake {
		f()
	}
	m.w.thaw()
}

// superEvery is how often a supervisor checks its deadline.
const superEvery = renew / 4

// simRun is one job's execution and its supervisor. It implements
// worker.Run.
type simRun struct {
	m       *machine
	lease   uint64
	job     string
	start   time.Duration
	done    chan struct{}
	ended   bool
	endAt   time.Duration // when it will end, -1 before it is known
	gen     int           // a sooner end voids the one scheduled before
	next    worker.Outcome
	outcome worker.Outcome
	waiters []func()
	iv      *interval

	// The supervisor: its deadline on the host's clock (zero: none yet),
	// its polling phase, and the check scheduled (-1: none).
	deadline time.Time
	phase    time.Duration
	checkAt  time.Duration
	checkGen int
	stopped  bool // the supervisor killed the job

	frozen  bool
	left    time.Duration // at a suspend: how long it had to go, -1 if unknown
	dirGone bool          // its run directory was removed

	// The daemon's own worker's supervisor, while no process holds the
	// daemon's store (localworker.go): its deadline moves with the time,
	// counted from its poll at freeFrom.
	free     bool
	freeFrom time.Time
}

var _ worker.Run = (*simRun)(nil)

func (r *simRun) Done() <-chan struct{} { return r.done }

func (r *simRun) Outcome() worker.Outcome { return r.outcome }

// Stop asks the job to end: a kill takes effect within killDelay, a cancel
// (a graceful stop) within cancelDelay.
func (r *simRun) Stop(kill bool) {
	if r.ended {
		return
	}
	s := r.m.w.s
	if kill {
		r.endIn(upTo(s.rng, killDelay), worker.Outcome{Outcome: "killed", Reason: "killed"})
		return
	}
	r.endIn(upTo(s.rng, cancelDelay), worker.Outcome{Outcome: "cancelled", Reason: "cancelled"})
}

// Fence moves the supervisor's deadline to at (earlier ones too).
func (r *simRun) Fence(at time.Time) {
	if r.ended {
		return
	}
	r.deadline = at
	r.m.w.s.tracef("%s: lease %d's supervisor: deadline %.4fs on the host's clock", r.m.w.id, r.lease, at.Sub(clocktest.Epoch).Seconds())
	if r.free { // a new deadline: the count starts again
		r.freeFrom = r.pollAfter(r.m.clock())
	}
	r.arm()
}

// arm schedules the supervisor's check at its first poll at or after the
// deadline, unless one is due sooner already.
func (r *simRun) arm() {
	if r.deadline.IsZero() || r.ended || r.frozen || r.stopped || r.free {
		return
	}
	dl := r.deadline.Sub(clocktest.Epoch)
	k := (dl - r.phase + superEvery - 1) / superEvery
	at := r.m.globalAt(clocktest.Epoch.Add(k*superEvery + r.phase))
	s := r.m.w.s
	if r.checkAt >= 0 && r.checkAt <= at && r.checkAt >= s.now {
		return
	}
	r.checkGen++
	gen := r.checkGen
	r.checkAt = max(at, s.now)
	s.at(at, func() {
		if gen != r.checkGen {
			return
		}
		r.checkAt = -1
		r.check()
	})
}

// check is one check of the supervisor: past the deadline, kill the job.
func (r *simRun) check() {
	if r.ended || r.frozen || r.stopped {
		return
	}
	if !r.due() {
		r.arm() // the deadline moved on since
		return
	}
	r.m.w.s.stats.Supervised++
	r.m.w.s.tracef("%s: lease %d's SUPERVISOR kills its job: past its deadline", r.m.w.id, r.lease)
	r.m.w.s.brk.supervise(r, false)
}

// due: the deadline has passed on the host's clock. (Compared on the global
// clock, as arm schedules: the host's clock read back from it may round a
// nanosecond short.)
func (r *simRun) due() bool {
	return !r.deadline.IsZero() && r.m.w.s.now >= r.m.globalAt(r.deadline)
}

// kill is the supervisor's kill taking its course: the job is gone within
// killDelay. atWake: the host just woke, and the job never ran again after
// the suspend.
func (r *simRun) kill(atWake bool) {
	if r.ended {
		return
	}
	r.stopped = true
	o := worker.Outcome{Outcome: "lost", Reason: "killed by its supervisor: past its fence deadline"}
	if atWake {
		r.gen++
		r.finish(o, r.m.suspendedAt)
		return
	}
	r.endIn(upTo(r.m.w.s.rng, killDelay), o)
}

// freeze stops the run's clock at a suspend.
func (r *simRun) freeze() {
	r.frozen = true
	r.left = -1
	if r.endAt >= 0 {
		r.left = r.endAt - r.m.w.s.now
	}
	r.gen++ // the end scheduled is void; thaw schedules it again
	r.endAt = -1
	r.checkGen++
	r.checkAt = -1
}

// thaw: the supervisor checks first; a job it lets live goes on where it
// stood.
func (r *simRun) thaw() {
	r.frozen = false
	if r.due() { // a kill under way at the suspend ends there too
		r.m.w.s.stats.Supervised++
		r.m.w.s.tracef("%s: lease %d's SUPERVISOR kills its job on wake: past its deadline", r.m.w.id, r.lease)
		r.m.w.s.brk.supervise(r, true)
		if r.ended {
			return
		}
	}
	if r.left >= 0 {
		r.endIn(r.left, r.next)
	}
	r.arm()
}

// endIn makes the run end d from now with o, unless it ends sooner already.
func (r *simRun) endIn(d time.Duration, o worker.Outcome) {
	s := r.m.w.s
	if r.frozen { // a stop asked for while frozen takes effect after the wake
		if r.left < 0 || d < r.left {
			r.left, r.next = d, o
		}
		return
	}
	at := s.now + d
	if r.endAt >= 0 && r.endAt <= at {
		return
	}
	r.gen++
	gen := r.gen
	r.endAt, r.next = at, o
	s.at(at, func() {
		if gen != r.gen || r.ended {
			return
		}
		r.finish(o, s.now)
	})
}

// finish ends the run with o; its execution ended at to.
func (r *simRun) finish(o worker.Outcome, to time.Duration) {
	s := r.m.w.s
	r.ended, r.outcome = true, o
	r.checkGen++
	close(r.done)
	s.tracef("%s: job %s ENDS (lease %d): %s", r.m.w.id, r.job, r.lease, o.Outcome)
	s.check.runEnded(r, to)
	for _, f := range r.waiters {
		f()
	}
	r.waiters = nil
}

// onDone runs f when the run ends (now, if it has).
func (r *simRun) onDone(f func()) {
	if r.ended {
		f()
		return
	}
	r.waiters = append(r.waiters, f)
}
