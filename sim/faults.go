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
//	sleep      12%  the daemon stops for 0–grace or grace–2×toleration
//	crash      12%  the daemon dies for 0–toleration; the store keeps 0, 50 or
//	                100% of what was not synced
//	suspend    12%  a worker's host (worker, supervisors, jobs) freezes for
//	                0–renew or 0–3×toleration; its boottime clock counts it
//	wall step  8%   the daemon's wall clock steps by up to ±2×toleration, or
//	                a day forward (wallstep.go)
//
// Late and duplicate messages (reports among them) are the network's.
type faults struct {
	s      *Sim
	healed bool
}

func newFaults(s *Sim) *faults { return &faults{s: s} }

func (f *faults) begin() { f.next() }

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
			w.die(f.uniform(0, 2*toleration), s.rng.IntN(2) == 0, s.rng.IntN(3) == 0)
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
			s.daemon.sleep(d)
		}
	case n < 20:
		if s.daemon.up {
			pct := []int{0, 50, 100}[s.rng.IntN(3)]
			s.daemon.crash(f.uniform(0, toleration), pct)
		}
	case n < 23:
		if !w.mach.suspended {
			d := upTo(s.rng, renew)
			if s.rng.IntN(2) == 0 {
				d = f.uniform(0, 3*toleration)
			}
			w.mach.suspend(d)
		}
	default:
		s.daemon.stepWall(f.wallStep())
	}
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
			if suspend {
				w.mach.suspend(d)
				return
			}
			s.stats.Pauses++
			w.pause(d)
		})
	})
}
