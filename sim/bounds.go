package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/leaselog/leaselog/timing"
)

// The timing every run uses, and the bounds the safety and liveness checks
// rely on. The fence falls at toleration − 2×renew after the last
// acknowledged heartbeat was sent; the daemon expires no sooner than
// toleration after it received it. The worker stops its jobs then, and each
// job's supervisor — a process of its own, which holds the same deadline on
// the host's boottime clock — kills it then whether the worker is alive, dead
// or paused. The 2×renew between the fence and the expiry is the slack that
// everything which delays a stop must fit in:
//
//	detection  the supervisor checks its deadline every renew/4    0.25 s
//	stop       a killed job is gone within killDelay               0.25 s
//	drift      a host clock running slow by maxDrift over the
//	           fence's 13 s makes it fence 13×d/(1−d) late          0.27 s
//	                                                        total  0.77 s < 2 s
//
// So a clock may drift by at most maxDrift (2%: a crystal is off by 0.01%,
// but a VM's clock that is not disciplined can be off by more). A pause of
// the worker process is not in the budget: the supervisor does not wait for
// the worker, so pauses of any length (and deaths) are drawn and the checks
// make no exception for them. A suspend of the worker's host freezes the
// supervisor too; on wake it checks first (machine.wake), and a job past its
// deadline never runs again. pauseBound is only where the pauses drawn
// cluster (the fence's old budget for a paused worker).
//
// A lease of its job's own timing (owntiming.go) has the 2×renew of its own
// renew, and its own fence to drift over: the timings drawn fit it.
const (
	renew      = time.Second
	grace      = 5 * time.Second
	toleration = 15 * time.Second

	maxDrift   = 0.02
	pauseBound = renew
	killDelay  = renew / 4
	// cancelDelay bounds a graceful stop (SIGTERM, then the job winds down).
	cancelDelay = renew

	// acquireWait is how long one acquire long-polls.
	acquireWait = 3 * time.Second
	// maxDelay is the longest a message may spend in the network: a late
	// message arrives after up to two tolerations.
	maxDelay = 2 * toleration
	// maxJob is the longest a job runs on its own.
	maxJob = 3 * toleration
)

func leaseConfig() timing.Config {
	return timing.Config{Renew: renew, Grace: grace, Toleration: toleration}
}

// livenessBound is how long after the faults stop every job must have ended,
// given n jobs not ended yet, a total capacity of c and the longest
// toleration of a lease, tol (the daemon's, or a job's own): messages still in
// flight arrive within maxDelay; a lease granted by a lost answer expires
// within tol plus a sweep; a fenced worker takes work again within a
// heartbeat; and then the jobs run, at most c at a time, each within maxJob
// plus a few renews for the acquire, the start, the report and its retries.
func livenessBound(n, c int, tol time.Duration) time.Duration {
	rounds := (n + c - 1) / max(c, 1)
	return maxDelay + tol + leaseConfig().SweepEvery() + 4*renew + time.Duration(rounds)*(maxJob+4*renew)
}

// params is what a seed draws before the run: the cast and the weather.
// What each fault does is drawn when it comes (faults.go): a daemon crash,
// for one, keeps 0, 50 or 100% of what was not synced.
type params struct {
	workers     int
	capacity    []int
	drift       []float64 // clock rate − 1, per worker
	clients     int
	jobs        int
	pDrop       float64 // per message
	pDup        float64
	pLate       float64 // a message takes up to maxDelay
	maxLatency  time.Duration
	faultEvery  time.Duration // mean time between faults
	submitEvery time.Duration // mean time between a client's submissions
	breakName   string
	// local: w0 is the local worker, on the daemon's host: it fences on the
	// host's CLOCK_MONOTONIC, which stands still while the host suspends —
	// and then the daemon sleeps with it. It is a part of the daemon's
	// process (localworker.go): it dies and stops with the daemon, and its
	// supervisors hold their jobs across the daemon's downtime.
	local bool
	// crashLoop: once in the run the daemon crash-loops (faults.go). Drawn
	// apart from the rest (loopDraw), so that a seed without a crash loop
	// runs as it did before the mode was added.
	crashLoop bool
}

func drawParams(r *rand.Rand, brk string) params {
	p := params{
		workers:    3 + r.IntN(3),
		clients:    1 + r.IntN(2),
		jobs:       10 + r.IntN(21),
		pDrop:      []float64{0, 0.01, 0.05, 0.15}[r.IntN(4)],
		pDup:       []float64{0, 0.01, 0.05}[r.IntN(3)],
		pLate:      []float64{0, 0.005, 0.02}[r.IntN(3)],
		maxLatency: []time.Duration{time.Millisecond, 20 * time.Millisecond, 200 * time.Millisecond}[r.IntN(3)],
		faultEvery: []time.Duration{3 * time.Second, 8 * time.Second, 20 * time.Second}[r.IntN(3)],
		breakName:  brk,
	}
	p.submitEvery = time.Duration(p.clients) * []time.Duration{time.Second, 3 * time.Second, 6 * time.Second}[r.IntN(3)]
	for range p.workers {
		p.capacity = append(p.capacity, 1+r.IntN(3))
		// A third of the clocks run as slow as allowed (the worst case for
		// fencing: the fence falls late), a third as fast, a third between.
		p.drift = append(p.drift, []float64{-maxDrift, maxDrift, (2*r.Float64() - 1) * maxDrift}[r.IntN(3)])
	}
	p.local = r.IntN(3) == 0
	return p
}

func (p params) String() string {
	return fmt.Sprintf("workers=%d capacity=%v drift=%.4f local=%v clients=%d jobs=%d drop=%.3f dup=%.3f late=%.3f latency≤%v faults every ~%v crash loop=%v",
		p.workers, p.capacity, p.drift, p.local, p.clients, p.jobs, p.pDrop, p.pDup, p.pLate, p.maxLatency, p.faultEvery, p.crashLoop)
}

// loopDraw draws params.crashLoop for seed, from a stream of its own: a
// quarter of the seeds crash-loop.
func loopDraw(seed uint64) bool {
	return rand.New(rand.NewPCG(seed, 0x6c6f6f70)).IntN(4) == 0
}

// upTo draws a duration in [0, bound], half the time from its last tenth:
// the faults that break a bound are the ones close to it.
func upTo(r *rand.Rand, bound time.Duration) time.Duration {
	if r.IntN(2) == 0 {
		return bound - time.Duration(r.Int64N(int64(bound/10)+1))
	}
	return time.Duration(r.Int64N(int64(bound) + 1))
}
