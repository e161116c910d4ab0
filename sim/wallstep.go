package sim

import (
	"time"
)

// The daemon's host has two clocks: its boottime clock, which never steps
// (the global clock: the daemon's host is the simulation's reference), and
// its wall clock, which an administrator or NTP may step either way. The
// daemon stamps events with the wall clock, but within one life its
// deadlines and gaps run on the boottime clock; the wall clock only bridges
// a restart. So a step never expires anything, and the checks (which judge
// silence on the global clock, not on event stamps) hold through any step.

// wallStep draws a step of the daemon's wall clock: within grace, up to
// 2×toleration, either way, or a day forward.
func (f *faults) wallStep() time.Duration {
	r := f.s.rng
	var d time.Duration
	switch r.IntN(5) {
	case 0, 1:
		d = f.uniform(1, grace)
	case 2, 3:
		d = f.uniform(grace, 2*toleration)
	default:
		return 24 * time.Hour
	}
	if r.IntN(2) == 0 {
		d = -d
	}
	return d
}

// stepWall steps the daemon's wall clock by d.
func (d *daemon) stepWall(by time.Duration) {
	d.s.stats.WallSteps++
	d.wallOffset += by
	d.s.tracef("FAULT the daemon's wall clock steps by %v", by)
}
