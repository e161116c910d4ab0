package crashtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
)

// Driver runs a real lease.Service on a store and takes it through every
// transition, one command at a time, recording what each command had
// acknowledged when it returned.
type Driver struct {
	FS      vfs.FS
	Clock   *clocktest.Clock
	Rec     *Record
	OnFatal func(string) // the log's; nil: record nothing, return
	// SnapshotEvery is the service's; 0 means 7, so that sweeps write
	// snapshots often.
	SnapshotEvery int

	Log *eventlog.Log
	Svc *lease.Service

	opens  int
	closed bool
	leases map[string]uint64 // job → the lease last granted for it
}

// ErrOpen wraps the error of a store that would not open: nothing was
// appended, nothing acknowledged.
var ErrOpen = errors.New("crashtest: store did not open")

// ErrClose wraps the error of a log that would not close: what it had
// acknowledged was durable already.
var ErrClose = errors.New("crashtest: log did not close")

// Step is one command of a scenario. Do returns nil when the service answered
// as the scenario expects, the service's error when it failed, and an error
// saying what was unexpected otherwise.
type Step struct {
	Name string
	Do   func() error
}

var ctx = context.Background()

// Open opens the log and the service (daemon.started). Run it as a Step, so
// that what it appends is recorded.
func (d *Driver) Open() error {
	d.Svc = nil
	onFatal := d.OnFatal
	if onFatal == nil {
		onFatal = func(string) {}
	}
	log, err := eventlog.Open(Dir, eventlog.Options{FS: d.FS, Logger: zerolog.Nop(), OnFatal: onFatal})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrOpen, err)
	}
	d.closed = false
	every := d.SnapshotEvery
	if every == 0 {
		every = 7
	}
	d.opens++
	svc, err := lease.Open(log, lease.Options{Config: leasetest.Timing(), Clock: d.Clock,
		Entropy: rand.New(rand.NewSource(int64(d.opens))), SnapshotEvery: every})
	d.Log = log
	if err != nil {
		return err
	}
	d.Svc = svc
	if d.leases == nil {
		d.leases = map[string]uint64{}
	}
	return nil
}

// Close closes the service, which writes a last snapshot (recorded as
// acknowledged once it returns), and then the log. If the service fails to
// close, the log is left open, for the caller to look at.
func (d *Driver) Close() error {
	if err := d.Svc.Close(); err != nil {
		return err
	}
	last := d.Log.LastSeq()
	if err := d.Rec.Ack(d.Log, last, last); err != nil {
		return err
	}
	d.closed = true
	if err := d.Log.Close(); err != nil {
		return fmt.Errorf("%w: %w", ErrClose, err)
	}
	return nil
}

// Closed reports whether the log was closed by Close, and not opened since.
func (d *Driver) Closed() bool { return d.closed }

// Run runs s and, if it returned without failing, records what it appended
// as acknowledged.
func (d *Driver) Run(s Step) error {
	var before uint64
	if d.Log != nil {
		before = d.Log.LastSeq()
	}
	if err := s.Do(); err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	if d.closed {
		return nil
	}
	if err := d.Rec.Ack(d.Log, before, d.Log.LastSeq()); err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	return nil
}

// Round is one pass through every transition, on jobs of its own (suffix r):
// submit, cancel of a queued job, acquire, start, heartbeat, report, the same
// report again, kill (revoke), unreachable and reachable, expiry of a run, of
// an evaluation (queued again) and of a revoked evaluation (cancelled), a
// stale report and the same again, a new lease on the requeued job, an
// evaluation capped at one requeue lost twice (queued again, then
// lease.failed), the daemon's absence (daemon.resumed), snapshots by the sweeper, and a restart:
// a graceful one (stop: queued jobs cancelled, daemon.stopping) on even
// rounds, a plain close on odd ones. The close writes a snapshot; the open
// records daemon.started with the downtime.
func (d *Driver) Round(r int) []Step {
	id := func(s string) string { return fmt.Sprintf("%s-%d", s, r) }
	run, eval, evalq, runx, queued, late := id("run"), id("eval"), id("evalq"), id("runx"), id("queued"), id("late")
	poison := id("poison")
	t := leasetest.Timing()
	return []Step{
		{"submit", func() error {
			for _, j := range []struct {
				id   string
				kind event.Kind
			}{{run, event.KindRun}, {eval, event.KindEvaluation}, {evalq, event.KindEvaluation},
				{runx, event.KindRun}, {queued, event.KindRun}, {late, event.KindRun}} {
				spec := fmt.Sprintf(`{"run":"make %s","round":%d}`, j.id, r)
				if _, _, err := d.Svc.Submit(ctx, j.id, j.kind, []byte(spec)); err != nil {
					return err
				}
			}
			return nil
		}},
		{"submit again", func() error { return d.expectJob(run, fsm.Queued, d.submitAgain(run, r)) }},
		{"cancel queued", func() error { return d.expectJob(queued, fsm.Cancelled, d.cancel(queued, false)) }},
		{"acquire w1", func() error { return d.acquire("w1", 2, run, eval) }},
		{"acquire w2", func() error { return d.acquire("w2", 2, evalq, runx) }},
		{"start", func() error { return d.start("w1", run) }},
		{"start again", func() error { return d.start("w1", run) }},
		{"heartbeat", func() error { return d.beat("w1", lease.Continue, run, eval) }},
		{"report", func() error { return d.report("w1", run, event.OutcomeSucceeded, `{"score": 1}`, false) }},
		{"report again", func() error { return d.report("w1", run, event.OutcomeSucceeded, `{"score": 1}`, false) }},
		{"kill", func() error { return d.expectJob(eval, fsm.Acquired, d.cancel(eval, true)) }},
		{"heartbeat kill", func() error { return d.beat("w1", lease.Kill, eval) }},
		{"w2 silent past grace", func() error {
			return d.tick(t.Grace+time.Second, func() error { return d.beat("w1", lease.Kill, eval) })
		}},
		{"reachable", func() error { return d.beat("w2", lease.Continue, evalq, runx) }},
		{"everyone silent past toleration", func() error { return d.tick(t.Toleration+time.Second, nil) }},
		{"expired", func() error {
			return errors.Join(d.expectJob(runx, fsm.Failed, nil), d.expectJob(evalq, fsm.Queued, nil), d.expectJob(eval, fsm.Cancelled, nil))
		}},
		{"stale report", func() error { return d.report("w2", runx, event.OutcomeFailed, `{"late": true}`, true) }},
		{"stale report again", func() error { return d.report("w2", runx, event.OutcomeFailed, `{"late": true}`, true) }},
		{"acquire requeued", func() error { return d.acquire("w3", 2, evalq, late) }}, // a requeued evaluation keeps its first queueing
		{"start w3", func() error { return d.start("w3", evalq) }},
		{"report requeued", func() error { return d.report("w3", evalq, event.OutcomeFailed, `{"score": 0}`, false) }},
		{"submit capped", func() error {
			one := 1
			_, _, err := d.Svc.SubmitItem(ctx, lease.SubmitItem{ID: poison, Kind: event.KindEvaluation, MaxRequeues: &one})
			return err
		}},
		{"acquire capped", func() error { return d.acquire("w4", 1, poison) }},
		{"lose capped", func() error { return d.expectJob(poison, fsm.Queued, d.lose("w4", poison)) }},
		{"acquire capped again", func() error { return d.acquire("w4", 1, poison) }},
		{"lose capped again", func() error { return d.expectJob(poison, fsm.Failed, d.lose("w4", poison)) }},
		{"daemon absent", func() error {
			d.Clock.Advance(3 * t.Toleration)
			if err := d.sweep(); err != nil {
				return err
			}
			return d.expectJob(late, fsm.Acquired, nil) // the absence expires nothing
		}},
		{"heartbeat after absence", func() error { return d.beat("w3", lease.Continue, late) }},
		{"sweep", func() error { d.Clock.Advance(t.Renew); return d.sweep() }},
		{"stop", func() error {
			if r%2 == 1 {
				return nil // a plain close: the queue outlives the restart
			}
			if _, _, err := d.Svc.Submit(ctx, id("stopped"), event.KindRun, nil); err != nil {
				return err
			}
			return d.Svc.Stop(ctx, lease.CancelQueued)
		}},
		{"close", d.Close},
		{"open", func() error {
			d.Clock.Advance(time.Minute) // downtime: daemon.started records it
			return d.Open()
		}},
	}
}

// submitAgain submits job id again, with its spec's keys in another order.
func (d *Driver) submitAgain(id string, r int) error {
	j, created, err := d.Svc.Submit(ctx, id, event.KindRun, []byte(fmt.Sprintf(`{"round": %d, "run": "make %s"}`, r, id)))
	if err == nil && (created || j.ID != id) {
		err = fmt.Errorf("resubmit of %s created a job", id)
	}
	return err
}

func (d *Driver) cancel(id string, kill bool) error {
	var err error
	if kill {
		_, err = d.Svc.Kill(ctx, id)
	} else {
		_, err = d.Svc.Cancel(ctx, id)
	}
	return err
}

// expectJob returns err if set, and otherwise checks job id's state.
func (d *Driver) expectJob(id string, want fsm.State, err error) error {
	if err != nil {
		return err
	}
	j, err := d.Svc.Job(ctx, id)
	if err != nil {
		return err
	}
	if j.State != want {
		return fmt.Errorf("job %s is %s, want %s", id, j.State, want)
	}
	return nil
}

func (d *Driver) acquire(worker string, n int, jobs ...string) error {
	gs, err := d.Svc.Acquire(ctx, worker, n)
	if err != nil {
		return err
	}
	if len(gs) != len(jobs) {
		return fmt.Errorf("%s acquired %d leases, want %d (%v)", worker, len(gs), len(jobs), jobs)
	}
	for i, g := range gs {
		if g.Job.ID != jobs[i] {
			return fmt.Errorf("%s acquired %s, want %s", worker, g.Job.ID, jobs[i])
		}
		if prev := d.leases[g.Job.ID]; g.Lease <= prev {
			return fmt.Errorf("job %s: token %d after %d", g.Job.ID, g.Lease, prev)
		}
		d.leases[g.Job.ID] = g.Lease
	}
	return nil
}

func (d *Driver) start(worker, job string) error {
	l, err := d.Svc.Start(ctx, worker, d.leases[job])
	if err == nil && l.State != fsm.Running {
		err = fmt.Errorf("lease %d is %s after start", l.ID, l.State)
	}
	return err
}

func (d *Driver) beat(worker string, want lease.Directive, jobs ...string) error {
	ids := make([]uint64, len(jobs))
	for i, j := range jobs {
		ids[i] = d.leases[j]
	}
	ds, err := d.Svc.Heartbeat(ctx, worker, ids)
	if err != nil {
		return err
	}
	if last := ds[len(ds)-1]; last.Directive != want {
		return fmt.Errorf("heartbeat of %s: lease %d is %s, want %s", worker, last.Lease, last.Directive, want)
	}
	return nil
}

func (d *Driver) report(worker, job string, o event.Outcome, result string, stale bool) error {
	a, err := d.Svc.Report(ctx, worker, d.leases[job], lease.Report{Outcome: o, Ref: "refs/leaselog/" + job, Result: []byte(result)})
	switch {
	case IsFailure(err):
		return err
	case stale != errors.Is(err, lease.ErrStaleLease):
		return fmt.Errorf("report on lease %d of %s: %v, want stale=%v", d.leases[job], job, err, stale)
	case stale != a.Stale || a.Seq == 0:
		return fmt.Errorf("report on lease %d of %s answered %+v", d.leases[job], job, a)
	}
	return nil
}

// lose reports job's lease lost.
func (d *Driver) lose(worker, job string) error {
	_, err := d.Svc.Report(ctx, worker, d.leases[job], lease.Report{Outcome: event.OutcomeLost, Reason: "agent vanished"})
	return err
}

func (d *Driver) sweep() error { return d.Svc.Sweep() }

// tick moves the clock by total in sweeper steps short enough not to look
// like the daemon's absence, sweeping after each; beat, if set, runs before
// each sweep.
func (d *Driver) tick(total time.Duration, beat func() error) error {
	step := leasetest.Timing().Grace / 2
	for done := time.Duration(0); done < total; done += step {
		d.Clock.Advance(min(step, total-done))
		if beat != nil {
			if err := beat(); err != nil {
				return err
			}
		}
		if err := d.sweep(); err != nil {
			return err
		}
	}
	return nil
}
