// Package sim is leaselog's deterministic simulation: one process, one seed,
// one run, exactly reproducible. It owns nothing of the product; it drives
// the real pieces under faults and checks what must hold.
//
//	            ┌──────────── the simulated network ────────────┐
//	workers ───►│ delay · drop · duplicate · reorder · partition│───► daemon
//	(worker.Core│      requests and replies, both ways          │    (lease.Service on
//	 driven by  └───────────────────────────────────────────────┘     Pebble on a
//	 sim events)                 ▲                                    crashable MemFS)
//	clients (submit, cancel, kill, read) ─────────────────┘
//
// # Determinism
//
// Everything runs on one goroutine from a discrete-event loop ordered by
// (time, sequence), with one seeded PRNG (math/rand/v2 PCG) for every draw:
// the network's delays and losses, the workload, the faults. Where it ranges
// over a map, the order cannot matter (a count) or the keys are sorted first
// (slices.Sorted(maps.Keys(m))).
//
// # The pieces
//
// The daemon is
// the real lease.Service on a real Pebble store on vfs.NewCrashableMem, with
// a manual clock that is the simulator's global clock. The workers are the
// real worker.Core — the decisions of worker.Worker: heartbeats, directives,
// self-fencing, the deadlines it gives its jobs' supervisors, reports (lost
// ones too, and what a refused report becomes), orphans, re-attach — driven
// by a loop shaped like Worker's goroutines, each on its host's drifting
// boottime clock. Their jobs are simulated runs, each under a simulated
// supervisor that kills it at its fence deadline whatever the worker does
// (the local worker's, in the daemon's process, move theirs by the daemon's
// downtime); their execution intervals are tracked on the global clock. The clients
// submit, cancel, kill and read, and send in a worker's name a second
// report on a lease it saw reported: the same, shortened as after a
// refusal, or saying otherwise (a late claim).
//
// # Faults and checks
//
// Faults are drawn per seed: worker pauses and deaths (with restarts that
// re-attach; the jobs outlive the worker's process, and their run
// directories may be removed meanwhile), worker hosts that suspend,
// network partitions, daemon sleeps past grace, daemon crashes with a
// CrashClone that keeps 0, 50 or 100% of unsynced data, and steps of the
// daemon's wall clock. The daemon compacts its log at random sweeps
// (compact.go), which no client may notice. After every
// step the checker holds the invariants of docs/design.md §7 (check.go); once the
// faults stop, every job must end within a stated bound (liveness); and the
// history of every call, with call and return times, must be linearizable
// against a sequential model of the lease service (package internal/testkit/linearize, porcupine).
//
// The bounds the checks rely on are the constants of bounds.go.
package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"time"

	"github.com/leaselog/leaselog/internal/testkit/clocktest"
)

// Options configures one run.
type Options struct {
	Seed  uint64
	Steps int  // events in the faulty phase; 0 means DefaultSteps
	Trace bool // keep a readable trace of the run
	// Break, when set, is a named fault injected into the simulated system
	// itself, for showing that the checks catch it (see breaks.go).
	Break string
	// NoCompaction keeps the daemon from compacting its log (compact.go):
	// a run without it must take the steps a run with it takes.
	NoCompaction bool
	// OwnTiming: half the jobs ask for a timing of their own at submit
	// (owntiming.go). A break on a job's own timing turns it on.
	OwnTiming bool
}

// DefaultSteps is how many events the faulty phase runs by default: about a
// minute and a half of simulated time, several tolerations.
const DefaultSteps = 3000

// Result is what one run found.
type Result struct {
	Seed  uint64
	Err   error  // the first violation, or nil
	Trace string // the readable trace, when asked for
	Stats Stats
	// History is every call the clients made, for the linearizability check.
	History *History
}

// Stats counts what a run exercised, so that a suite can tell whether its
// seeds reach the paths that matter.
type Stats struct {
	Events, Steps                int
	SimTime                      time.Duration
	Appended                     uint64
	Jobs, Leases, Expired, Stale int
	Poisoned                     int // evaluations failed at their cap on requeues (lease.failed)
	OwnLeases, OwnExpired        int // leases granted with their job's own timing (owntiming.go); those expired
	Pauses, LongPauses, Deaths   int
	Aimed                        int // pauses aimed at a fence
	Suspends, WallSteps          int // hosts suspended; the daemon's wall clock stepped
	LocalSuspends                int // the daemon's host suspended, with the local worker
	Crashes, Sleeps, Partitions  int
	CrashLoops                   int           // the daemon crash-looped (a loop's crashes count in Crashes)
	Compactions, Compacted       int           // passes that compacted jobs; heartbeats they removed
	Fenced, Supervised           int           // fences fallen in workers; jobs killed by supervisors
	Held                         int           // deadlines the local worker's supervisors moved by the daemon's downtime
	Lost, Dropped, Dup           int           // lost reports accepted
	Again, Claims                int           // reports on a lease already reported: sent again (second reports), refused as late claims
	Healed                       time.Duration // when the faults stopped
	Quiet                        time.Duration // when every job had ended
}

// Sim is one run. It is not safe for concurrent use: everything happens on
// the goroutine that calls Run.
type Sim struct {
	opts  Options
	rng   *rand.Rand
	p     params
	now   time.Duration // the global clock, since clocktest.Epoch
	seq   uint64
	queue actionQueue
	steps int

	net     *network
	daemon  *daemon
	workers []*simWorker
	clients []*client
	check   *checker
	hist    *History
	faults  *faults
	compact *compaction
	trace   *strings.Builder
	brk     *breaker
	route   *routing
	own     *ownTimings

	healed bool
	err    error
	stats  Stats
	// accepted is, per job, the report of its lease that its worker saw
	// accepted: what a client sends again (client.again).
	accepted map[string]sentReport
}

// action is one thing that happens at a time. An action for a worker runs only
// in the incarnation it was scheduled for, and waits while the worker is
// paused.
type action struct {
	at  time.Duration
	seq uint64
	w   *simWorker
	inc int
	fn  func()
}

type actionQueue []*action

func (q actionQueue) Len() int { return len(q) }
func (q actionQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q actionQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *actionQueue) Push(x any)   { *q = append(*q, x.(*action)) }
func (q *actionQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}

// at schedules fn at global time t (not before now).
func (s *Sim) at(t time.Duration, fn func()) *action {
	return s.push(&action{at: max(t, s.now), fn: fn})
}

// after schedules fn d from now on the global clock.
func (s *Sim) after(d time.Duration, fn func()) *action { return s.at(s.now+d, fn) }

func (s *Sim) push(e *action) *action {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.queue, e)
	return e
}

// wallNow is the global clock as a wall time: the daemon's clock.
func (s *Sim) wallNow() time.Time { return clocktest.Epoch.Add(s.now) }

func (s *Sim) tracef(format string, args ...any) {
	if s.trace == nil {
		return
	}
	fmt.Fprintf(s.trace, "%10.4fs  ", s.now.Seconds())
	fmt.Fprintf(s.trace, format, args...)
	s.trace.WriteByte('\n')
}

// fail records the first violation; the run stops at the end of the step.
func (s *Sim) fail(format string, args ...any) {
	if s.err != nil {
		return
	}
	s.err = fmt.Errorf("t=%.4fs: %s", s.now.Seconds(), fmt.Sprintf(format, args...))
	s.tracef("VIOLATION: %v", s.err)
}

// Run runs the simulation of opts.Seed and returns what it found.
func Run(opts Options) *Result {
	if opts.Steps <= 0 {
		opts.Steps = DefaultSteps
	}
	s := &Sim{opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)), accepted: map[string]sentReport{}}
	if opts.Trace {
		s.trace = &strings.Builder{}
	}
	res := &Result{Seed: opts.Seed}
	s.err = s.runSafely()
	if s.err == nil {
		s.err = s.check.final()
	}
	if s.daemon != nil {
		s.daemon.close()
	}
	s.stats.SimTime = s.now
	res.Err, res.Stats, res.History = s.err, s.stats, s.hist
	if s.trace != nil {
		res.Trace = s.trace.String()
	}
	return res
}

// runSafely is run, with a panic (of the simulator, or of the code under
// test) turned into the run's failure, so that the seed is reported with the
// command that replays it.
func (s *Sim) runSafely() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("t=%.4fs: panic: %v\n%s", s.now.Seconds(), r, debug.Stack())
		}
	}()
	return s.run()
}

func (s *Sim) run() error {
	brk, err := newBreaker(s, s.opts.Break)
	if err != nil {
		return err
	}
	s.brk = brk
	s.p = drawParams(s.rng, s.opts.Break)
	s.p.crashLoop = loopDraw(s.opts.Seed)
	s.route = drawRouting(s.opts.Seed, s.p.workers)
	s.own = drawOwnTiming(s.opts.Seed, s.opts.OwnTiming || ownTimingBreaks[s.opts.Break])
	s.compact = newCompaction(s.opts.Seed, s.opts.NoCompaction)
	s.hist = newHistory()
	s.check = newChecker(s)
	s.net = newNetwork(s)
	s.faults = newFaults(s)
	s.tracef("seed %d: %s", s.opts.Seed, s.p)
	if _, err := openDaemon(s); err != nil {
		return err
	}
	for i := range s.p.workers {
		w := newSimWorker(s, i)
		s.workers = append(s.workers, w)
		s.after(time.Duration(s.rng.Int64N(int64(renew))), w.boot)
	}
	for i := range s.p.clients {
		c := newClient(s, i)
		s.clients = append(s.clients, c)
		c.begin()
	}
	s.faults.begin()

	for s.err == nil {
		if s.queue.Len() == 0 {
			return fmt.Errorf("sim: nothing left to happen at %v", s.now)
		}
		e := heap.Pop(&s.queue).(*action)
		if e.w != nil {
			if e.inc != e.w.inc {
				continue // an event of an incarnation that died
			}
			if e.w.frozen() {
				e.w.deferred = append(e.w.deferred, e)
				continue
			}
		}
		s.now = e.at
		s.stats.Events++
		e.fn()
		if s.err != nil {
			break
		}
		if !s.healed {
			s.steps++
			if s.steps >= s.opts.Steps {
				s.heal()
			}
			continue
		}
		if done, err := s.check.liveness(); err != nil || done {
			return err
		}
	}
	return s.err
}

// heal stops every fault: from now on the network only delays (a little),
// every worker runs, the daemon is up and awake. What is still in flight
// keeps its delay.
func (s *Sim) heal() {
	s.healed = true
	s.stats.Steps = s.steps
	s.stats.Healed = s.now
	s.tracef("HEAL: faults stop; every job must end within %v", s.check.livenessBound())
	s.faults.heal()
	s.net.heal()
	s.daemon.heal()
	for _, w := range s.workers {
		w.heal()
	}
	for _, c := range s.clients {
		c.heal()
	}
	s.check.startLiveness()
}
