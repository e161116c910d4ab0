package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/worker"
)

// machine is a worker's executor: the jobs it runs are separate processes
// that outlive the worker's process (as worker/local's agents do), and their
// records (worktrees) outlive both, unless wiped. It implements
// worker.Executor.
type machine struct {
	w    *simWorker
	runs map[uint64]*simRun // by lease: what Reattach finds
}

var _ worker.Executor = (*machine)(nil)

func newMachine(w *simWorker) *machine { return &machine{w: w, runs: make(map[uint64]*simRun)} }

// Start starts the job of g: it runs from now until it ends on its own or a
// stop takes effect. A few checkouts fail.
func (m *machine) Start(_ context.Context, g api.Grant) (worker.Run, error) {
	s := m.w.s
	if s.rng.Float64() < 0.02 {
		s.tracef("%s: job %s (lease %d) could not start", m.w.id, g.Job.ID, g.Lease)
		return nil, errors.New("checkout failed")
	}
	r := &simRun{m: m, lease: g.Lease, job: g.Job.ID, start: s.now, done: make(chan struct{}), endAt: -1}
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

// Reattach finds the run of a lease after the worker restarted.
func (m *machine) Reattach(_ context.Context, g api.Grant) (worker.Run, bool, error) {
	r := m.runs[g.Lease]
	if r == nil {
		return nil, false, nil
	}
	return r, true, nil
}

// crash: the machine died with the worker. Its jobs die now; wipe loses
// their worktrees too.
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

// simRun is one job's execution. It implements worker.Run.
type simRun struct {
	m       *machine
	lease   uint64
	job     string
	start   time.Duration
	done    chan struct{}
	ended   bool
	endAt   time.Duration // when it will end, -1 before it is known
	gen     int           // a sooner end voids the one scheduled before
	outcome worker.Outcome
	waiters []func()
	iv      *interval
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

// endIn makes the run end d from now with o, unless it ends sooner already.
func (r *simRun) endIn(d time.Duration, o worker.Outcome) {
	s := r.m.w.s
	at := s.now + d
	if r.endAt >= 0 && r.endAt <= at {
		return
	}
	r.gen++
	gen := r.gen
	r.endAt = at
	s.at(at, func() {
		if gen != r.gen || r.ended {
			return
		}
		r.ended, r.outcome = true, o
		close(r.done)
		s.tracef("%s: job %s ENDS (lease %d): %s", r.m.w.id, r.job, r.lease, o.Outcome)
		s.check.runEnded(r)
		for _, f := range r.waiters {
			f()
		}
		r.waiters = nil
	})
}

// onDone runs f when the run ends (now, if it has).
func (r *simRun) onDone(f func()) {
	if r.ended {
		f()
		return
	}
	r.waiters = append(r.waiters, f)
}

// Fence is to move the simulated supervisor's deadline.
func (r *simRun) Fence(at time.Time) {}
