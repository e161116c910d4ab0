package sim

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	flagSeeds = flag.Int("sim.seeds", 0, "how many seeds to run (default 1000, 40 under the race detector)")
	flagFirst = flag.Uint64("sim.first", 1, "the first of the -sim.seeds seeds, so that a long run can be split")
	flagSeed  = flag.Uint64("sim.seed", 0, "run just this seed, with its trace")
	flagSteps = flag.Int("sim.steps", DefaultSteps, "events in the faulty phase of each run")
	flagBreak = flag.String("sim.break", "", "break the simulated system on purpose (see breaks.go)")
	flagOwn   = flag.Bool("sim.own", false, "the jobs draw their own timing (Options.OwnTiming, owntiming.go)")
)

// porcupineTimeout bounds the linearizability check of one seed.
const porcupineTimeout = 20 * time.Second

func seedCount() int {
	switch {
	case *flagSeeds > 0:
		return *flagSeeds
	case raceEnabled:
		return 40
	}
	return 1000
}

// regressions are the seeds that once failed (testdata/regressions).
func regressions(t *testing.T) []uint64 {
	f, err := os.Open("testdata/regressions")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var seeds []uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		seed, err := strconv.ParseUint(line, 10, 64)
		if err != nil {
			t.Fatalf("testdata/regressions: %q: %v", line, err)
		}
		seeds = append(seeds, seed)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return seeds
}

// TestSimulation runs the regression seeds and then -sim.seeds seeds (or
// just -sim.seed), each a whole simulated run with liveness after the
// faults stop, and checks each history for linearizability.
func TestSimulation(t *testing.T) {
	if *flagSeed != 0 {
		runSeed(t, *flagSeed, true)
		return
	}
	var total totals
	t.Run("regression", func(t *testing.T) {
		for _, seed := range regressions(t) {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				t.Parallel()
				total.add(runSeed(t, seed, false))
			})
		}
	})
	t.Run("seeds", func(t *testing.T) {
		for seed := *flagFirst; seed < *flagFirst+uint64(seedCount()); seed++ {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				t.Parallel()
				total.add(runSeed(t, seed, false))
			})
		}
	})
	t.Logf("%s", total.String())
}

// runSeed runs one seed and fails t with the command that replays it and
// the run's trace.
func runSeed(t *testing.T, seed uint64, verbose bool) (Stats, Linearizability) {
	t.Helper()
	return runOptions(t, Options{Seed: seed, Steps: *flagSteps, Break: *flagBreak, OwnTiming: *flagOwn}, verbose)
}

// runOptions is runSeed with the options of the run given.
func runOptions(t *testing.T, opts Options, verbose bool) (Stats, Linearizability) {
	t.Helper()
	seed := opts.Seed
	opts.Trace = verbose
	res := Run(opts)
	var lin Linearizability
	err := res.Err
	if err == nil {
		lin, err = CheckLinearizable(res.History, porcupineTimeout)
	}
	if verbose {
		t.Logf("trace of seed %d:\n%s", seed, res.Trace)
		t.Logf("stats: %+v; linearizability: %d operations, %s in %v", res.Stats, lin.Ops, lin.Result, lin.Elapsed)
	}
	if err == nil {
		return res.Stats, lin
	}
	cmd := fmt.Sprintf("go test ./sim -run 'TestSimulation$' -sim.seed=%d -sim.steps=%d -v", seed, opts.Steps)
	if opts.Break != "" {
		cmd += " -sim.break=" + opts.Break
	}
	if opts.OwnTiming {
		cmd += " -sim.own"
	}
	trace := res.Trace
	if !verbose {
		opts.Trace = true
		trace = Run(opts).Trace
	}
	path := writeTrace(seed, trace)
	t.Fatalf("seed %d: %v\nreplay: %s\ntrace: %s\nlast steps:\n%s", seed, err, cmd, path, tail(trace, 60))
	return res.Stats, lin
}

func writeTrace(seed uint64, trace string) string {
	f, err := os.CreateTemp("", fmt.Sprintf("leaselog-sim-%d-*.trace", seed))
	if err != nil {
		return "(not written: " + err.Error() + ")"
	}
	defer f.Close()
	if _, err := f.WriteString(trace); err != nil {
		return "(not written: " + err.Error() + ")"
	}
	return f.Name()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// totals sums what the seeds exercised.
type totals struct {
	mu    sync.Mutex
	runs  int
	s     Stats
	ops   int
	lin   time.Duration
	linMx time.Duration
}

func (t *totals) add(s Stats, l Linearizability) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.runs++
	t.s.Events += s.Events
	t.s.Appended += s.Appended
	t.s.Jobs += s.Jobs
	t.s.Leases += s.Leases
	t.s.Expired += s.Expired
	t.s.Stale += s.Stale
	t.s.Pauses += s.Pauses
	t.s.Aimed += s.Aimed
	t.s.LongPauses += s.LongPauses
	t.s.Deaths += s.Deaths
	t.s.Crashes += s.Crashes
	t.s.CrashLoops += s.CrashLoops
	t.s.Sleeps += s.Sleeps
	t.s.Partitions += s.Partitions
	t.s.Fenced += s.Fenced
	t.s.Suspends += s.Suspends
	t.s.LocalSuspends += s.LocalSuspends
	t.s.WallSteps += s.WallSteps
	t.s.Supervised += s.Supervised
	t.s.Held += s.Held
	t.s.Lost += s.Lost
	t.s.Poisoned += s.Poisoned
	t.s.Dropped += s.Dropped
	t.s.Dup += s.Dup
	t.s.Again += s.Again
	t.s.Claims += s.Claims
	t.s.Compactions += s.Compactions
	t.s.Compacted += s.Compacted
	t.s.SimTime += s.SimTime
	t.ops += l.Ops
	t.lin += l.Elapsed
	t.linMx = max(t.linMx, l.Elapsed)
}

func (t *totals) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.s
	return fmt.Sprintf("%d runs, %v simulated: %d events, %d appended; %d jobs, %d leases, %d expired, %d stale reports; "+
		"%d pauses (%d past a renew), %d host suspends (%d of the daemon's host, with the local worker), %d aimed at a fence, %d deaths, %d partitions, %d daemon sleeps, %d crashes (%d crash loops), %d wall-clock steps; "+
		"%d fences fell, %d jobs killed by their supervisor, %d held by theirs across the daemon's downtime, %d losses reported, %d evaluations failed at their cap; "+
		"%d second reports sent, %d late claims refused; %d compactions removed %d heartbeats; "+
		"%d messages lost, %d duplicated; 0 overlaps (none excused); porcupine: %d operations in %v (slowest seed %v)",
		t.runs, s.SimTime.Round(time.Second), s.Events, s.Appended, s.Jobs, s.Leases, s.Expired, s.Stale,
		s.Pauses, s.LongPauses, s.Suspends, s.LocalSuspends, s.Aimed, s.Deaths, s.Partitions, s.Sleeps, s.Crashes, s.CrashLoops, s.WallSteps,
		s.Fenced, s.Supervised, s.Held, s.Lost, s.Poisoned, s.Again, s.Claims, s.Compactions, s.Compacted, s.Dropped, s.Dup,
		t.ops, t.lin.Round(time.Millisecond), t.linMx.Round(time.Millisecond))
}
