package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
)

var daemonTiming = api.Timing{RenewSeconds: 0.02, GraceSeconds: 0.1, TolerationSeconds: 0.3}

// fakeDaemon records calls and answers from scripted state.
type fakeDaemon struct {
	mu         sync.Mutex
	queue      []api.Grant
	live       []api.Grant // what WorkerLeases answers
	directives map[uint64]api.Directive
	beatErr    error // heartbeats fail with this while set
	reportErr  []error
	reports    chan api.Report
	started    chan uint64
	beats      chan []uint64
	reported   []uint64     // leases reported, in order
	tried      []api.Report // every report sent, answered or refused
}

func newFakeDaemon() *fakeDaemon {
	return &fakeDaemon{directives: map[uint64]api.Directive{}, reports: make(chan api.Report, 16),
		started: make(chan uint64, 16), beats: make(chan []uint64, 1024)}
}

func (d *fakeDaemon) Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error) {
	d.mu.Lock()
	n := min(max, len(d.queue))
	gs := d.queue[:n]
	d.queue = d.queue[n:]
	d.mu.Unlock()
	if len(gs) == 0 {
		select {
		case <-ctx.Done():
		case <-time.After(wait / 10):
		}
	}
	return gs, nil
}

func (d *fakeDaemon) Heartbeat(ctx context.Context, worker string, leases []uint64) (api.HeartbeatReply, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case d.beats <- leases:
	default:
	}
	if d.beatErr != nil {
		return api.HeartbeatReply{}, d.beatErr
	}
	r := api.HeartbeatReply{Timing: daemonTiming}
	for _, id := range leases {
		dir, ok := d.directives[id]
		if !ok {
			dir = api.DirectiveContinue
		}
		r.Leases = append(r.Leases, api.LeaseDirective{Lease: id, Directive: dir})
	}
	return r, nil
}

func (d *fakeDaemon) WorkerLeases(ctx context.Context, worker string) ([]api.Grant, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.live, nil
}

func (d *fakeDaemon) Start(ctx context.Context, worker string, id uint64) (api.Lease, error) {
	d.started <- id
	return api.Lease{Lease: id, State: "running"}, nil
}

func (d *fakeDaemon) Report(ctx context.Context, id uint64, r api.Report) (api.ReportReply, error) {
	d.mu.Lock()
	d.tried = append(d.tried, r)
	var err error
	if len(d.reportErr) > 0 {
		err, d.reportErr = d.reportErr[0], d.reportErr[1:]
	}
	d.mu.Unlock()
	if err != nil {
		return api.ReportReply{}, err
	}
	d.mu.Lock()
	d.reported = append(d.reported, id)
	d.mu.Unlock()
	d.reports <- r
	return api.ReportReply{Accepted: true, Lease: id}, nil
}

// fakeRun ends when told to, or when stopped. It records the deadlines its
// supervisor is given, and sends each on fenced.
type fakeRun struct {
	mu      sync.Mutex
	done    chan struct{}
	outcome Outcome
	stops   []bool
	fences  []time.Time
	fenced  chan time.Time
}

func newFakeRun() *fakeRun {
	return &fakeRun{done: make(chan struct{}), fenced: make(chan time.Time, 1024)}
}

func (r *fakeRun) Done() <-chan struct{} { return r.done }
func (r *fakeRun) Outcome() Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcome
}
func (r *fakeRun) finish(o Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.done:
	default:
		r.outcome = o
		close(r.done)
	}
}
func (r *fakeRun) Stop(kill bool) {
	r.mu.Lock()
	r.stops = append(r.stops, kill)
	r.mu.Unlock()
	o := Outcome{Outcome: "cancelled"}
	if kill {
		o.Outcome = "killed"
	}
	r.finish(o)
}

type fakeExecutor struct {
	mu       sync.Mutex
	runs     map[uint64]*fakeRun
	reattach map[uint64]bool
	started  chan *fakeRun
}

func newFakeExecutor() *fakeExecutor {
	return &fakeExecutor{runs: map[uint64]*fakeRun{}, reattach: map[uint64]bool{}, started: make(chan *fakeRun, 16)}
}

func (e *fakeExecutor) Start(ctx context.Context, g api.Grant) (Run, error) {
	r := newFakeRun()
	e.mu.Lock()
	e.runs[g.Lease] = r
	e.mu.Unlock()
	e.started <- r
	return r, nil
}

func (e *fakeExecutor) Reattach(ctx context.Context, g api.Grant) (Run, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.reattach[g.Lease] {
		return nil, false, nil
	}
	r := newFakeRun()
	e.runs[g.Lease] = r
	return r, true, nil
}

// newTestWorker runs a worker on d and e until the test ends; edits change
// its options first.
func newTestWorker(t *testing.T, d Daemon, e Executor, now func() time.Time, edits ...func(*Options)) (*Worker, context.CancelFunc, chan error) {
	opts := Options{ID: "w1", Capacity: 2, Daemon: d, Executor: e, Timing: ConfigOf(daemonTiming), Wait: 50 * time.Millisecond, Logger: zerolog.Nop(), Now: now}
	for _, edit := range edits {
		edit(&opts)
	}
	w, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, cancel, done
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func grant(id uint64, job string) api.Grant {
	return api.Grant{Lease: id, Job: api.Job{ID: job}, Timing: daemonTiming}
}

func TestRunsAndReportsJobs(t *testing.T) {
	d, e := newFakeDaemon(), newFakeExecutor()
	d.queue = []api.Grant{grant(3, "j1"), grant(4, "j2"), grant(5, "j3")}
	newTestWorker(t, d, e, nil)
	r1 := receive(t, e.started, "first start")
	r2 := receive(t, e.started, "second start")
	if a, b := receive(t, d.started, "start call"), receive(t, d.started, "start call"); a+b != 7 {
		t.Fatalf("started leases %d and %d", a, b)
	}
	select {
	case <-e.started:
		t.Fatal("a third job started beyond capacity 2")
	default:
	}
	r1.finish(Outcome{Outcome: "succeeded", Ref: "refs/x"})
	rep := receive(t, d.reports, "report")
	if rep.Outcome != "succeeded" || rep.Ref != "refs/x" || rep.Worker != "w1" {
		t.Fatalf("report %+v", rep)
	}
	receive(t, e.started, "the third job, once a slot is free")
	r2.finish(Outcome{Outcome: "failed", Reason: "exit status 1"})
	if rep := receive(t, d.reports, "report"); rep.Outcome != "failed" {
		t.Fatalf("report %+v", rep)
	}
}

// unansweredReports is a daemon that answers no report: each waits for its
// call's context to end, then a while longer for Run to return before it.
type unansweredReports struct {
	*fakeDaemon
	entered   chan struct{} // a report call came in
	finished  chan struct{} // a report call returned
	returned  chan struct{} // closed once Run has returned
	overtaken atomic.Bool   // Run returned while a report call was in flight
}

func (d *unansweredReports) Report(ctx context.Context, id uint64, r api.Report) (api.ReportReply, error) {
	defer func() { d.finished <- struct{}{} }()
	select {
	case d.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	select {
	case <-d.returned:
		d.overtaken.Store(true)
	case <-time.After(100 * time.Millisecond): // a Run that waits for this call cannot return first
	}
	return api.ReportReply{}, ctx.Err()
}

// TestRunWaitsForItsLeases: Run returns only once the goroutines of single
// leases have ended — here one whose report the daemon has not answered
// when ctx ends.
func TestRunWaitsForItsLeases(t *testing.T) {
	d := &unansweredReports{fakeDaemon: newFakeDaemon(), entered: make(chan struct{}, 1),
		finished: make(chan struct{}, 16), returned: make(chan struct{})}
	e := newFakeExecutor()
	d.queue = []api.Grant{grant(3, "j1")}
	w, err := New(Options{ID: "w1", Capacity: 1, Daemon: d, Executor: e, Timing: ConfigOf(daemonTiming), Wait: 50 * time.Millisecond, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := w.Run(ctx)
		close(d.returned)
		done <- err
	}()
	receive(t, e.started, "the job's start").finish(Outcome{Outcome: "succeeded"})
	receive(t, d.entered, "the report")
	cancel()
	if err := receive(t, done, "Run's return"); err != nil {
		t.Fatal(err)
	}
	receive(t, d.finished, "the report's return")
	if d.overtaken.Load() {
		t.Fatal("Run returned while a report call was still in flight")
	}
}

func TestDirectives(t *testing.T) {
	d, e := newFakeDaemon(), newFakeExecutor()
	d.queue = []api.Grant{grant(3, "j1"), grant(4, "j2")}
	d.directives[3] = api.DirectiveCancel
	d.directives[4] = api.DirectiveGone
	w, _, _ := newTestWorker(t, d, e, nil)
	a, b := receive(t, e.started, "start"), receive(t, e.started, "start")
	receive(t, a.done, "")
	receive(t, b.done, "")
	rep := receive(t, d.reports, "report of the cancelled job")
	if rep.Outcome != "cancelled" {
		t.Fatalf("report %+v", rep)
	}
	// The gone lease is dropped: stopped at once with a kill, forgotten, never
	// reported. A report is sent before a lease is forgotten, so once a
	// heartbeat names neither lease the list of reports is final.
	e.mu.Lock()
	stops := e.runs[4].stops
	e.mu.Unlock()
	if len(stops) == 0 || !stops[0] {
		t.Fatalf("gone lease stops %v, want a kill", stops)
	}
	// The first heartbeats, sent before any lease was taken, name none too:
	// skip to one that names a lease, then wait for one that names none.
	for len(receive(t, d.beats, "a heartbeat naming a lease")) == 0 {
	}
	for len(receive(t, d.beats, "a heartbeat naming no lease")) > 0 {
	}
	if held := w.Leases(); len(held) > 0 {
		t.Fatalf("still holding %v", held)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.reported) != 1 || d.reported[0] != 3 {
		t.Fatalf("reported leases %v, want [3]", d.reported)
	}
}

// TestSelfFencing: heartbeats stop being acknowledged; once the last
// acknowledged one was sent more than toleration − 2×renew ago on the
// worker's clock, every job is stopped, and reported lost when the daemon
// answers again.
func TestSelfFencing(t *testing.T) {
	var clockMu sync.Mutex
	now := time.Now()
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	advance := func(d time.Duration) { clockMu.Lock(); now = now.Add(d); clockMu.Unlock() }

	d, e := newFakeDaemon(), newFakeExecutor()
	d.queue = []api.Grant{grant(3, "j1")}
	w, _, _ := newTestWorker(t, d, e, clock)
	run := receive(t, e.started, "start")
	receive(t, d.started, "start call")

	d.mu.Lock()
	d.beatErr = errors.New("connection refused")
	d.mu.Unlock()
	fence := ConfigOf(daemonTiming).SelfFence()
	w.mu.Lock()
	last := w.mu.core.lastAck
	w.mu.Unlock()
	advance(fence - clock().Sub(last)) // exactly at the fence: not past it
	w.checkFence()
	if isDone(run) {
		t.Fatal("fenced at the fence, not past it")
	}
	advance(time.Millisecond)
	w.checkFence()
	receive(t, run.done, "the fenced job to stop")
	if run.stops[0] != true {
		t.Fatalf("fence stopped the job with %v, want kill", run.stops)
	}
	d.mu.Lock()
	d.beatErr = nil
	d.mu.Unlock()
	rep := receive(t, d.reports, "the report of the fenced job")
	if rep.Outcome != "lost" || rep.Reason != Fenced().Reason {
		t.Fatalf("report %+v", rep)
	}
}

func TestReattach(t *testing.T) {
	d, e := newFakeDaemon(), newFakeExecutor()
	d.live = []api.Grant{grant(7, "alive"), grant(8, "gone")}
	e.reattach[7] = true
	newTestWorker(t, d, e, nil)
	rep := receive(t, d.reports, "the lost lease's report")
	if rep.Outcome != "lost" || rep.Reason != Lost(nil).Reason {
		t.Fatalf("lost lease reported %+v", rep)
	}
	// The re-attached job is heartbeated, and reported when it ends.
	for {
		if ids := receive(t, d.beats, "heartbeat"); len(ids) == 1 && ids[0] == 7 {
			break
		}
	}
	e.mu.Lock()
	r := e.runs[7]
	e.mu.Unlock()
	receive(t, r.fenced, "the re-attached run's deadline, from the heartbeat that renewed it")
	r.finish(Outcome{Outcome: "succeeded"})
	if rep := receive(t, d.reports, "report"); rep.Outcome != "succeeded" {
		t.Fatalf("report %+v", rep)
	}
}

// failingReattach cannot re-attach to anything.
type failingReattach struct {
	*fakeExecutor
	err error
}

func (e failingReattach) Reattach(context.Context, api.Grant) (Run, bool, error) {
	return nil, false, e.err
}

// TestFailedReattachIsLost: a lease whose run could not be re-attached is
// reported lost, saying why.
func TestFailedReattachIsLost(t *testing.T) {
	d := newFakeDaemon()
	d.live = []api.Grant{grant(8, "unreadable")}
	err := errors.New("permission denied")
	newTestWorker(t, d, failingReattach{newFakeExecutor(), err}, nil)
	if rep := receive(t, d.reports, "the report"); rep.Outcome != "lost" || rep.Reason != Lost(err).Reason {
		t.Fatalf("report %+v, want lost: %s", rep, Lost(err).Reason)
	}
}

// lostGrantDaemon grants a lease but loses the answer on the way.
type lostGrantDaemon struct {
	*fakeDaemon
	lost chan struct{}
}

func (d *lostGrantDaemon) Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error) {
	select {
	case <-d.lost:
		return d.fakeDaemon.Acquire(ctx, worker, max, wait)
	default:
		close(d.lost)
		d.mu.Lock()
		d.live = append(d.live, grant(9, "orphan")) // granted, then the connection dropped
		d.mu.Unlock()
		return nil, errors.New("connection reset by peer")
	}
}

func TestLostGrantIsAdopted(t *testing.T) {
	d := &lostGrantDaemon{fakeDaemon: newFakeDaemon(), lost: make(chan struct{})}
	e := newFakeExecutor()
	newTestWorker(t, d, e, nil)
	receive(t, e.started, "the orphan's job to start")
	if id := receive(t, d.started, "start call"); id != 9 {
		t.Fatalf("started lease %d, want the orphan 9", id)
	}
}

func TestReportRetriesUntilAnswered(t *testing.T) {
	d, e := newFakeDaemon(), newFakeExecutor()
	d.queue = []api.Grant{grant(3, "j1")}
	d.reportErr = []error{errors.New("connection reset"), &api.Error{Status: 503, Code: api.CodeUnavailable}}
	newTestWorker(t, d, e, nil)
	receive(t, e.started, "start").finish(Outcome{Outcome: "succeeded"})
	if rep := receive(t, d.reports, "report after two failures"); rep.Outcome != "succeeded" {
		t.Fatalf("report %+v", rep)
	}
}

func (r *fakeRun) Fence(at time.Time) {
	r.mu.Lock()
	r.fences = append(r.fences, at)
	r.mu.Unlock()
	select {
	case r.fenced <- at:
	default:
	}
}

// detailsDaemon takes heartbeats with details (Detailer), sending each
// heartbeat's details on details.
type detailsDaemon struct {
	*fakeDaemon
	details chan map[uint64]json.RawMessage
}

func (d *detailsDaemon) HeartbeatDetails(ctx context.Context, worker string, hb api.Heartbeat) (api.HeartbeatReply, error) {
	d.details <- hb.Details
	return d.Heartbeat(ctx, worker, hb.Leases)
}

// progressRun is a fakeRun whose job tells its progress (Progresser).
type progressRun struct {
	*fakeRun
	progress atomic.Pointer[[]byte]
}

func (r *progressRun) Progress() []byte {
	if p := r.progress.Load(); p != nil {
		return *p
	}
	return nil
}

type progressExecutor struct {
	*fakeExecutor
	runs chan *progressRun
}

func (e *progressExecutor) Start(ctx context.Context, g api.Grant) (Run, error) {
	r, _ := e.fakeExecutor.Start(ctx, g)
	p := &progressRun{fakeRun: r.(*fakeRun)}
	e.runs <- p
	return p, nil
}

// TestProgressTravelsInHeartbeats: what a job says of its progress goes to
// the daemon with the next heartbeat, as its lease's details, once; a
// change goes again.
func TestProgressTravelsInHeartbeats(t *testing.T) {
	d := &detailsDaemon{fakeDaemon: newFakeDaemon(), details: make(chan map[uint64]json.RawMessage, 1024)}
	e := &progressExecutor{fakeExecutor: newFakeExecutor(), runs: make(chan *progressRun, 1)}
	d.queue = []api.Grant{grant(3, "j1")}
	newTestWorker(t, d, e, nil)
	r := receive(t, e.runs, "the start")
	for _, p := range []string{`{"step":1}`, `{"step":2}`} {
		b := []byte(p)
		r.progress.Store(&b)
		got := receive(t, d.details, "a heartbeat with details")
		if len(got) != 1 || string(got[3]) != p {
			t.Fatalf("details %v, want lease 3's %s", got, p)
		}
	}
	r.finish(Outcome{Outcome: "succeeded"})
	receive(t, d.reports, "report")
	select {
	case got := <-d.details:
		t.Fatalf("details %v sent again", got)
	default:
	}
}

// callOrder is a daemon that records the order its heartbeat and acquire
// calls come in.
type callOrder struct {
	*fakeDaemon
	mu    sync.Mutex
	calls []string
}

func (d *callOrder) record(call string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, call)
}

func (d *callOrder) Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error) {
	d.record("acquire")
	return d.fakeDaemon.Acquire(ctx, worker, max, wait)
}

func (d *callOrder) Heartbeat(ctx context.Context, worker string, leases []uint64) (api.HeartbeatReply, error) {
	d.record(fmt.Sprintf("heartbeat %v", leases))
	return d.fakeDaemon.Heartbeat(ctx, worker, leases)
}

// The first heartbeat goes before the first acquire, so a lease granted at
// start is not named by a heartbeat that the scheduler happened to run late
// (between its grant and its start), and the worker knows the daemon's
// timing before it takes work.
func TestFirstHeartbeatBeforeFirstAcquire(t *testing.T) {
	for range 20 {
		d := &callOrder{fakeDaemon: newFakeDaemon()}
		d.queue = []api.Grant{grant(3, "j1")}
		e := newFakeExecutor()
		newTestWorker(t, d, e, nil)
		receive(t, e.started, "the job's start")
		d.mu.Lock()
		calls := d.calls
		d.mu.Unlock()
		if len(calls) < 2 || calls[0] != "heartbeat []" || calls[1] != "acquire" {
			t.Fatalf("calls %q: want the first heartbeat, naming no lease, before the first acquire", calls)
		}
	}
}

// grantedAsCut is a daemon whose long poll is granted g just as its caller
// goes: the grant is staged before the daemon hears the stop cut the call,
// so the lease is the worker's and the answer reaches no one.
type grantedAsCut struct {
	*fakeDaemon
	g       api.Grant
	polling chan struct{} // an acquire waits
}

func (d *grantedAsCut) Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error) {
	select {
	case d.polling <- struct{}{}:
	default:
	}
	<-ctx.Done()
	d.mu.Lock()
	d.live = append(d.live, d.g)
	d.mu.Unlock()
	return nil, ctx.Err()
}

// TestStopStartsALeaseGrantedAsItCutTheAcquire: a lease granted to the long
// poll the stop cut is one the worker never heard of. Left alone it would
// expire toleration later, its job never run; the stop finds it in the
// worker's lease list, renews it and starts its job like any grant, and
// leaves it running as it leaves every job, for a restarted worker to
// re-attach: not reported, not stopped.
func TestStopStartsALeaseGrantedAsItCutTheAcquire(t *testing.T) {
	d := &grantedAsCut{fakeDaemon: newFakeDaemon(), g: grant(7, "j7"), polling: make(chan struct{}, 1)}
	e := newFakeExecutor()
	w, err := New(Options{ID: "w1", Capacity: 1, Daemon: d, Executor: e, Timing: ConfigOf(daemonTiming), Wait: time.Minute, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	receive(t, d.polling, "the long poll")
	cancel()
	if err := receive(t, done, "Run's return"); err != nil {
		t.Fatal(err)
	}
	var run *fakeRun
	select {
	case run = <-e.started:
	default:
		t.Fatal("the lease granted as the stop cut the acquire: its job never started")
	}
	select {
	case id := <-d.started:
		if id != 7 {
			t.Fatalf("the daemon was told lease %d started, want 7", id)
		}
	default:
		t.Fatal("the daemon was never told the job of lease 7 started")
	}
	named := false
	for len(d.beats) > 0 {
		named = named || slices.Contains(<-d.beats, 7)
	}
	if !named {
		t.Fatal("no heartbeat renewed lease 7 before its job started")
	}
	d.mu.Lock()
	reported := d.reported
	d.mu.Unlock()
	run.mu.Lock()
	stops := run.stops
	run.mu.Unlock()
	if len(reported) != 0 || len(stops) != 0 || isDone(run) {
		t.Fatalf("the job left at the stop: reported %v, stopped %v, ended %v; want it running", reported, stops, isDone(run))
	}
	if got := w.Leases(); !slices.Equal(got, []uint64{7}) {
		t.Fatalf("the worker holds %v at its stop, want [7]", got)
	}
}
