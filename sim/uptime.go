package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/leaselog/leaselog/projection"
)

// uptime is the daemon's up-time as the checker keeps it, on the global
// clock, for the rule that a silent worker's lease expires (silentExpired):
// the daemon was up when it ran and was awake; it was not while it was down
// after a crash, asleep, or — before a crash that kept less than all it had
// written (a host that lost power) — since its last event, the last moment
// the store then kept for sure. Each crash and each sleep cuts a life or a
// wake short: the daemon knows itself alive as of its last sweep or event,
// up to a sweep period before.
type uptime struct {
	off  []span          // the daemon was not up, or could not know it was
	cuts []time.Duration // a crash or a sleep began
	from time.Duration   // the open span: the daemon went down or to sleep then
	last time.Duration   // the last event appended (synced by the step that appended it)
}

// appended: an event was appended now.
func (u *uptime) appended(now time.Duration) { u.last = now }

// stopped: the daemon crashed or fell asleep now; kept is whether the store
// keeps what it wrote unsynced (a crash's image keeping 100%, or a sleep);
// asleep, that it crashed in its sleep, which cut its wake already.
func (u *uptime) stopped(now time.Duration, kept, asleep bool) {
	if !asleep {
		u.cuts = append(u.cuts, now)
		u.from = now
	}
	if !kept {
		u.off = append(u.off, span{u.last, now})
	}
}

// started: the daemon is up again (restarted or awake) now.
func (u *uptime) started(now time.Duration) { u.off = append(u.off, span{u.from, now}) }

// up is how long the daemon was up in [from, to], and how many crashes and
// sleeps began in it.
func (u *uptime) up(from, to time.Duration) (time.Duration, int) {
	d := to - from
	off := slices.Clone(u.off)
	slices.SortFunc(off, func(a, b span) int { return int(a.from - b.from) })
	var cur span
	flush := func() {
		if o := min(to, cur.to) - max(from, cur.from); o > 0 {
			d -= o
		}
	}
	for i, s := range off {
		switch {
		case i == 0:
			cur = s
		case s.from <= cur.to:
			cur.to = max(cur.to, s.to)
		default:
			flush()
			cur = s
		}
	}
	if len(off) > 0 {
		flush()
	}
	n := 0
	for _, c := range u.cuts {
		if c > from && c <= to {
			n++
		}
	}
	return d, n
}

// silentExpired is the rule, checked after every sweep: a live lease whose
// worker has been silent for more than its toleration (its own, or the
// daemon's) of the daemon's up-time,
// plus a sweep period for each crash or sleep since, has expired by now. So
// neither a crash loop (a daemon killed and restarted more often than
// toleration) nor a sleepy daemon keeps a silent worker's lease for ever.
func (k *checker) silentExpired() {
	every := leaseConfig().SweepEvery()
	for _, l := range k.fold.Leases(projection.LeaseFilter{}) {
		heard, ok := k.heard[l.ID]
		if !ok {
			continue
		}
		up, cuts := k.uptime.up(heard, k.s.now)
		if slack, tol := time.Duration(cuts)*every, k.tolerationOf(l.ID); up > tol+slack+time.Millisecond {
			k.s.fail("lease %d (job %s) OUTLIVES ITS SILENT WORKER %s: %v of the daemon's up-time since its last word, over %d crashes and sleeps (toleration %v, slack %v)",
				l.ID, l.Job, l.Worker, up, cuts, tol, slack)
			return
		}
	}
}

func (s span) String() string { return fmt.Sprintf("[%.4fs, %.4fs]", s.from.Seconds(), s.to.Seconds()) }
