package sim

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/timing"
)

// The seeds TestSimulationOwnTiming runs: about 40 s on two shared cores
// (a tenth of them under the race detector, which slows a run tenfold).
const ownTimingSeeds, ownTimingSeedsRace = 800, 40

// TestOwnTimingDraws: every timing a job draws is one the daemon takes
// (timing.Own, within ownBounds), and fits the budget of bounds.go for its
// own renew: the supervisor's detection, the kill and the drift of its
// host's clock over its own fence stay inside its 2×renew.
func TestOwnTimingDraws(t *testing.T) {
	asked, none := 0, 0
	for seed := uint64(1); seed <= 50; seed++ {
		o := drawOwnTiming(seed, true)
		for range 100 {
			a := o.job()
			if a == (timing.Config{}) {
				none++
				continue
			}
			asked++
			c, err := timing.Own(a, leaseConfig(), ownBounds())
			if err != nil {
				t.Fatalf("seed %d: %+v: %v", seed, a, err)
			}
			drift := time.Duration(float64(c.SelfFence()) * maxDrift / (1 - maxDrift))
			if used := superEvery + killDelay + drift; used >= 2*c.Renew {
				t.Errorf("seed %d: %s: detection, kill and drift take %v, not within 2×renew", seed, event.TimingString(c), used)
			}
			if c.Toleration > o.longest {
				t.Errorf("seed %d: toleration %v drawn, the longest counted is %v", seed, c.Toleration, o.longest)
			}
		}
	}
	if asked == 0 || none == 0 {
		t.Fatalf("%d jobs asked for their own timing, %d did not: want both", asked, none)
	}
	if o := drawOwnTiming(1, false); o.job() != (timing.Config{}) || o.r != nil {
		t.Fatal("with the option off, a job asked for a timing of its own")
	}
}

// TestSimulationOwnTiming runs seeds with per-job timing (Options.OwnTiming):
// each run checked as TestSimulation checks one, the fence, expiry and
// liveness rules held per lease, by its own toleration; and the seeds
// must have expired leases of their own timing, or the rules were not
// put to the test.
func TestSimulationOwnTiming(t *testing.T) {
	n := uint64(ownTimingSeeds)
	if raceEnabled {
		n = ownTimingSeedsRace
	}
	if *flagSeeds > 0 {
		n = uint64(*flagSeeds)
	}
	var mu sync.Mutex
	var own, expired int
	t.Run("seeds", func(t *testing.T) {
		for seed := uint64(1); seed <= n; seed++ {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				t.Parallel()
				st, _ := runOptions(t, Options{Seed: seed, Steps: *flagSteps, OwnTiming: true}, false)
				mu.Lock()
				own, expired = own+st.OwnLeases, expired+st.OwnExpired
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		return
	}
	if expired == 0 {
		t.Fatalf("%d leases of their job's own timing, none expired: the seeds show nothing", own)
	}
	t.Logf("%d seeds: %d leases of their job's own timing, %d of them expired", n, own, expired)
}
