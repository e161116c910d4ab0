package sim

import (
	"math/rand/v2"
	"time"

	"github.com/leaselog/leaselog/timing"
)

// Per-job timing (Options.OwnTiming). Half the jobs ask for a timing of
// their own at submit, within the daemon's bounds (ownBounds), in one of the
// shapes of ownShapes; the daemon expires each lease at its own toleration,
// and the worker and its jobs' supervisors fence each lease by its own
// (worker/perlease.go). The draws come from a stream of their own
// (drawOwnTiming), and a run without the option draws nothing: its
// trajectory is what it was before the option existed.
//
// The checker holds the rules per lease, by its own toleration (or the
// daemon's): a lease expires after more than its toleration of silence
// (observe), and a live lease silent for its toleration of the daemon's
// up-time has expired (silentExpired); its job has stopped when it expires,
// as for every lease; and the liveness bound counts the longest toleration
// drawn.

// ownBounds are the daemon's bounds on a job's own timing in the
// simulation.
func ownBounds() timing.Bounds {
	return timing.Bounds{MinRenew: renew / 2, MaxToleration: 2 * toleration}
}

// ownShape is a kind of timing a job asks for: the fields it names (a zero
// field is the daemon's), its toleration drawn in [tolFrom, tolTo].
type ownShape struct {
	renew, grace   time.Duration
	tolFrom, tolTo time.Duration
}

// ownShapes are what a job's own timing is drawn from. Each fits the
// budget of bounds.go for its own renew (TestOwnTimingDraws): a faster
// renew leaves less slack between the fence and the expiry, so it goes with
// a short toleration, whose fence drifts less.
var ownShapes = []ownShape{
	// The daemon's renew and grace, a shorter toleration, and a longer.
	{tolFrom: 6 * time.Second, tolTo: 10 * time.Second},
	{tolFrom: 20 * time.Second, tolTo: 25 * time.Second},
	// A longer renew: the fence falls 2×renew before the expiry (the
	// worker heartbeats at the daemon's renew still, or at a shorter one a
	// lease asks for: worker.Core.Renew).
	{renew: 2 * time.Second, grace: 6 * time.Second, tolFrom: 8 * time.Second, tolTo: 25 * time.Second},
	// A shorter renew, and so a short toleration.
	{renew: renew / 2, grace: 2 * time.Second, tolFrom: 3 * time.Second, tolTo: 8 * time.Second},
}

// ownTimings draws the jobs' own timing of a seed.
type ownTimings struct {
	r       *rand.Rand // nil: the jobs ask for none
	longest time.Duration
}

// drawOwnTiming is the jobs' own timing for seed, from a stream of its
// own; none unless on.
func drawOwnTiming(seed uint64, on bool) *ownTimings {
	o := &ownTimings{longest: toleration}
	if on {
		o.r = rand.New(rand.NewPCG(seed, 0x74696d696e67))
	}
	return o
}

// job draws the timing a job asks for: zero (the daemon's) half the time.
func (o *ownTimings) job() timing.Config {
	if o.r == nil || o.r.IntN(2) == 0 {
		return timing.Config{}
	}
	sh := ownShapes[o.r.IntN(len(ownShapes))]
	c := timing.Config{Renew: sh.renew, Grace: sh.grace,
		Toleration: sh.tolFrom + time.Duration(o.r.Int64N(int64(sh.tolTo-sh.tolFrom)+1)).Truncate(time.Millisecond)}
	o.longest = max(o.longest, c.Toleration)
	return c
}

// tolerationOf is lease id's toleration: its own, or the daemon's.
func (k *checker) tolerationOf(id uint64) time.Duration {
	if t, ok := k.tolerations[id]; ok {
		return t
	}
	return toleration
}
