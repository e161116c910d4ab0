package sim

import (
	"time"
)

// faults injects the seed's faults during the faulty phase, one at a time at
// exponentially distributed intervals (mean params.faultEvery):
//
//	pause      20%  a worker process stops for 0–pauseBound (half the time;
//	                near the bound half of that) or 0–3×toleration; its jobs
//	                and their supervisors run on
//	death      8%   a worker process dies for 0–2×toleration (its jobs live on
//	                under their supervisors), its machine with it half the time
//	partition  28%  a worker's link is cut both ways for 0–2×toleration; when
//	                past the fence, the worker is also paused, or its host
//	                suspended, just before its fence falls
//	sleep      12%  the daemon stops for 0–grace or grace–2×toleration; with
//	                a local worker (a third of the seeds), half the time its
//	                host suspends, the local worker and its jobs with it, and
//	                otherwise the local worker stops with it (its process)
//	crash      12%  the daemon dies for 0–toleration; the store keeps 0, 50 or
//	                100% of what was not synced; a local worker dies with it,
//	                its jobs held by their supervisors (localworker.go)
//	suspend    12%  a worker's host (worker, supervisors, jobs) freezes for
//	                0–renew or 0–3×toleration; its boottime clock counts it
//	wall step  8%   the daemon's wall clock steps by up to ±2×toleration, or
//	                a day forward (wallstep.go)
//
// And in a quarter of the seeds, once, at a time drawn in the first half
// minute, the daemon crash-loops (crashLoop): it is killed loopLives times,
// each after a life of loopLife at most — far less than toleration — and
// started again up to loopDown later. Most of the kills keep all the store
// had written (a process killed: its host runs on), some only what was
// synced (the power lost).
//
// Late and duplicate messages (reports among them) are the network's.
type faults struct {
	s      *Sim
	healed bool
}

func newFaults(s *Sim) *faults { return &faults{s: s} }

func (f *faults) begin() {
	f.next()
	if s := f.s; s.p.crashLoop {
		s.after(f.uniform(0, 30*time.Second), f.crashLoop)
	}
}

// The crash loop's lives, each drawn: how many, how long each lasts, how
// long the daemon stays down between two.
const (
	loopLives = 24
	loopLife  = 4 * time.Second
	loopDown  = 2 * time.Second
)

// crashLoop kills the daemon 8 to loopLives times, each life lasting up to
// loopLife after its restart.
func (f *faults) crashLoop() {
	s := f.s
	s.stats.CrashLoops++
	lives := 8 + s.rng.IntN(loopLives-7)
	s.tracef("FAULT the daemon crash-loops: %d lives", lives)
	var kill func(left int)
	kill = func(left int) {
		if f.healed || left == 0 {
			return
		}
		down := f.uniform(0, loopDown)
		if d := s.daemon; d.up && !s.workers[0].mach.daemonHost() {
			pct := 100
			if s.rng.IntN(4) == 0 {
				pct = []int{0, 50}[s.rng.IntN(2)]
			}
			d.crash(down, pct)
		}
		s.after(down+f.uniform(100*time.Millisecond, loopLife), func() { kill(left - 1) })
	}
	kill(lives)
}

func (f *faults) heal() { f.healed = true }

func (f *faults) next() {
	s := f.s
	d := time.Duration(s.rng.ExpFloat64() * float64(s.p.faultEvery))
	s.after(d, func() {
		if f.healed {
			return
		}
		f.inject()
		f.next()
	})
}

func (f *faults) uniform(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(f.s.rng.Int64N(int64(hi-lo)+1))
}

func (f *faults) inject() {
	s := f.s
	w := s.workers[s.rng.IntN(len(s.workers))]
	switch n := s.rng.IntN(25); {
	case n < 5:
		if w.alive && !w.frozen() {
			d := upTo(s.rng, pauseBound)
			if s.rng.IntN(2) == 0 {
				d = f.uniform(0, 3*toleration)
			}
			s.stats.Pauses++
			w.pause(d)
		}
	case n < 7:
		if w.alive && !w.mach.suspended {
			// The local worker's host is the daemon's: it is not taken down
			// alone (a daemon crash is the daemon's own fault).
			machine := s.rng.IntN(2) == 0 && !w.mach.monotonic
			w.die(f.uniform(0, 2*toleration), machine, s.rng.IntN(3) == 0)
		}
	case n < 14:
		d := f.uniform(0, 2*toleration)
		s.stats.Partitions++
		w.cutUntil = max(w.cutUntil, s.now+d)
		s.tracef("FAULT %s's link is cut for %v", w.id, d)
		f.pauseAtFence(w, d)
	case n < 17:
		if s.daemon.up && !s.daemon.asleep {
			d := f.uniform(0, grace)
			if s.rng.IntN(3) > 0 {
				d = f.uniform(grace+1, 2*toleration)
			}
			// With a local worker, half the daemon's sleeps are its host's
			// suspends, which the local worker and its jobs sleep through.
			if w0 := s.workers[0]; w0.mach.monotonic && s.rng.IntN(2) == 0 {
				f.suspend(w0, d)
			} else {
				s.daemon.sleep(d, false)
			}
		}
	case n < 20:
		if s.daemon.up && !s.workers[0].mach.daemonHost() {
			pct := []int{0, 50, 100}[s.rng.IntN(3)]
			s.daemon.crash(f.uniform(0, toleration), pct)
		}
	case n < 23:
		d := upTo(s.rng, renew)
		if s.rng.IntN(2) == 0 {
			d = f.uniform(0, 3*toleration)
		}
		f.suspend(w, d)
	default:
		s.daemon.stepWall(f.wallStep())
	}
}

// suspend suspends w's host for d, unless it is suspended already. The
// daemon's own host (the local worker's) suspends with the daemon, when the
// daemon is up and awake, for any time: the daemon takes every sleep of its
// host as its absence (its boottime clock less its monotonic one), as the
// local worker's monotonic fence does not count it. It reports whether the
// host was suspended.
func (f *faults) suspend(w *simWorker, d time.Duration) bool {
	m, dm := w.mach, f.s.daemon
	switch {
	case m.suspended:
		return false
	case !m.monotonic:
		m.suspend(d)
		return true
	case dm.up && !dm.asleep:
		f.s.stats.LocalSuspends++
		dm.sleep(d, true)
		m.suspend(d)
		return true
	}
	return false
}

// pauseAtFence pauses w, or suspends its host (a third of the time), while
// its link is cut (for cut), just before its fence falls for a running job,
// when a pause costs the most: the fence check it delays is the one that
// would have stopped the job. The pause is within the bound three times in
// four; a suspend wakes past the fence half the time. The worker's clock is read
// when its link has been cut for a while, so that the fence it aims at is
// the one no heartbeat will move.
func (f *faults) pauseAtFence(w *simWorker, cut time.Duration) {
	s := f.s
	inc := w.inc
	s.after(min(cut, 2*renew), func() {
		if f.healed || w.inc != inc || !w.alive {
			return
		}
		at, ok := w.fenceAt()
		if !ok || at > s.now+cut {
			return
		}
		d := upTo(s.rng, pauseBound)
		if s.rng.IntN(4) == 0 {
			d = f.uniform(pauseBound, 3*toleration)
		}
		suspend := s.rng.IntN(3) == 0
		if suspend && s.rng.IntN(2) == 0 {
			d = f.uniform(2*renew, 2*toleration)
		}
		s.at(at-f.uniform(0, 20*time.Millisecond), func() {
			if f.healed || w.inc != inc || !w.alive || w.frozen() || !w.cut() {
				return
			}
			s.stats.Aimed++
			if suspend && f.suspend(w, d) {
				return
			}
			s.stats.Pauses++
			w.pause(d)
		})
	})
}
