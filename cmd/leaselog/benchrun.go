package main

// The workload of `leaselog bench` (../shared/peers/WORKLOAD.md): E enqueuers
// submit N jobs; W workers each acquire one (long poll), start it, heartbeat
// it H times and report it succeeded, until N jobs are done. Every call is
// timed by its caller. At the end the log is read back: each job must have
// exactly one lease.reported (succeeded) and no stale report.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaselog/leaselog/api"
)

// benchAdmin is what the bench asks of the daemon as an admin (submit) and a
// reader (the check); *api.Client is one.
type benchAdmin interface {
	Submit(ctx context.Context, s api.Submit) (api.Job, bool, error)
	SubmitBatch(ctx context.Context, jobs []api.Submit) ([]api.Submitted, error)
	Jobs(ctx context.Context, state, kind string) ([]api.Job, error)
	Cancel(ctx context.Context, id string) (api.Job, error)
	Events(ctx context.Context, q api.EventQuery) (api.Events, error)
	Health(ctx context.Context) (api.Health, error)
}

// benchWorker is what the bench asks of the daemon as a worker; *api.Client
// is one.
type benchWorker interface {
	Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error)
	AcquireStart(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error)
	Start(ctx context.Context, worker string, lease uint64) (api.Lease, error)
	Heartbeat(ctx context.Context, worker string, leases []uint64) (api.HeartbeatReply, error)
	Report(ctx context.Context, lease uint64, r api.Report) (api.ReportReply, error)
	ReportNext(ctx context.Context, lease uint64, r api.Report, next api.Next) (api.ReportReply, error)
}

// benchKind is the kind of the jobs the bench submits (as the shared
// harness's leaselog peer does); the daemon runs nothing for them.
const benchKind = "evaluation"

// benchAcquireWait is the long poll of one acquire (the harness waits 5 s;
// the wait only counts when nothing is queued, and a stopped run waits for
// the calls it sent).
const benchAcquireWait = 2 * time.Second

// bench is one run of the workload.
type bench struct {
	admin      benchAdmin
	worker     benchWorker
	jobs       int
	workers    int
	enqueuers  int
	heartbeats int
	proto      benchProtocol
	http       string // http1 or h2c: the clients' protocol, for the output
	prefix     string // job ids are prefix + "-" + number
	workerID   string // every worker acts as this id; "" gives each its own
	progress   func(done, submitted int64)

	seq0      uint64          // the log's last seq before the first submit
	stop      context.Context // done when the run stops
	submitted atomic.Int64
	calls     atomic.Int64 // calls of the workload (not of the checks)
	done      atomic.Int64
	accepted  []atomic.Int32 // accepted reports per job
	rejected  atomic.Int64   // reports refused by the token check
	lost      atomic.Int64   // heartbeats answered with anything but continue
	lat       [4][]time.Duration
	latMu     sync.Mutex
}

// The timed operations.
const (
	opSubmit = iota
	opAcquire
	opHeartbeat
	opReport
)

var opNames = [4]string{"submit", "acquire", "heartbeat", "report"}

func (b *bench) jobID(i int) string { return b.prefix + "-" + strconv.Itoa(i) }

// jobIndex is the number of one of this run's job ids, or -1.
func (b *bench) jobIndex(id string) int {
	rest, ok := strings.CutPrefix(id, b.prefix+"-")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || i >= b.jobs || b.jobID(i) != id {
		return -1
	}
	return i
}

func (b *bench) workerName(i int) string {
	if b.workerID != "" {
		return b.workerID
	}
	return fmt.Sprintf("%s-w%03d", b.prefix, i)
}

// record keeps one goroutine's samples.
func (b *bench) record(samples *[4][]time.Duration) {
	b.latMu.Lock()
	defer b.latMu.Unlock()
	for op := range samples {
		b.lat[op] = append(b.lat[op], samples[op]...)
	}
}

// run runs the workload and returns its elapsed time: from the first submit
// to the last accepted report. An error of a call stops the run.
func (b *bench) run(ctx context.Context) (time.Duration, error) {
	b.accepted = make([]atomic.Int32, b.jobs)
	h, err := b.admin.Health(ctx)
	if err != nil {
		return 0, fmt.Errorf("the daemon's /healthz: %w", err)
	}
	b.seq0 = h.Seq
	// The workers' token is tried before anything is written: a heartbeat of
	// no lease renews nothing.
	names := b.workers
	if b.workerID != "" {
		names = 1 // every worker is that one
	}
	for w := range names {
		if _, err := b.worker.Heartbeat(ctx, b.workerName(w), nil); err != nil {
			return 0, fmt.Errorf("worker %s: heartbeat: %w", b.workerName(w), workerCallHint(err))
		}
	}
	// A worker takes the oldest queued job, whoever submitted it.
	if queued, err := b.admin.Jobs(ctx, "queued", ""); err != nil {
		return 0, fmt.Errorf("list the queued jobs: %w", err)
	} else if len(queued) > 0 {
		return 0, fmt.Errorf("the daemon has %d queued jobs (%s first): its workers would take them; run the bench on a daemon with none queued", len(queued), queued[0].ID)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	fail := func(err error) { cancel(err) }
	// A call, once sent, is let finish (an acquire's long poll, too): when
	// the run stops, nothing the daemon does after the cleanup's look is
	// left behind. Between calls, every goroutine looks at b.stop.
	b.stop = ctx
	call := context.WithoutCancel(ctx)

	var spec []byte
	spec, _ = json.Marshal(api.Spec{Run: "bench"})
	result := json.RawMessage(`{"result":"ok"}`)

	var wg sync.WaitGroup
	var slots atomic.Int64 // jobs not yet taken by a worker
	slots.Store(int64(b.jobs))
	var next atomic.Int64 // the next job number to submit
	t0 := time.Now()
	size := max(b.proto.batch, 1)
	for range b.enqueuers {
		wg.Go(func() {
			var s [4][]time.Duration
			defer b.record(&s)
			for {
				lo := int(next.Add(int64(size)) - int64(size))
				if lo >= b.jobs || ctx.Err() != nil {
					return
				}
				hi := min(lo+size, b.jobs)
				st := time.Now()
				b.calls.Add(1)
				if err := b.submit(call, lo, hi, spec); err != nil {
					fail(err)
					return
				}
				s[opSubmit] = append(s[opSubmit], time.Since(st))
				b.submitted.Add(int64(hi - lo))
			}
		})
	}
	var end atomic.Int64 // ns after t0 of the last accepted report
	for w := range b.workers {
		worker := b.workerName(w)
		wg.Go(func() {
			var s [4][]time.Duration
			defer b.record(&s)
			err := b.workerLoop(call, worker, &slots, result, &s, func() {
				b.done.Add(1)
				for {
					e, now := end.Load(), int64(time.Since(t0))
					if now <= e || end.CompareAndSwap(e, now) {
						break
					}
				}
			})
			if err != nil {
				fail(err)
			}
		})
	}
	stop := make(chan struct{})
	var pw sync.WaitGroup
	if b.progress != nil {
		pw.Go(func() {
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					b.progress(b.done.Load(), b.submitted.Load())
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	pw.Wait()
	if err := context.Cause(ctx); err != nil {
		return 0, b.cleanup(err)
	}
	return time.Duration(end.Load()), nil
}

// submit submits jobs lo to hi-1: one call, a batch or a single submit.
func (b *bench) submit(ctx context.Context, lo, hi int, spec json.RawMessage) error {
	if b.proto.batch == 0 {
		_, created, err := b.admin.Submit(ctx, api.Submit{ID: b.jobID(lo), Kind: benchKind, Spec: spec})
		if err == nil && !created {
			err = errors.New("it existed already")
		}
		if err != nil {
			return fmt.Errorf("submit %s: %w", b.jobID(lo), err)
		}
		return nil
	}
	items := make([]api.Submit, 0, hi-lo)
	for i := lo; i < hi; i++ {
		items = append(items, api.Submit{ID: b.jobID(i), Kind: benchKind, Spec: spec})
	}
	subs, err := b.admin.SubmitBatch(ctx, items)
	if err != nil {
		return fmt.Errorf("submit %s to %s in a batch: %w", b.jobID(lo), b.jobID(hi-1), err)
	}
	if len(subs) != len(items) {
		return fmt.Errorf("submit %s to %s in a batch: %d answers for %d jobs", b.jobID(lo), b.jobID(hi-1), len(subs), len(items))
	}
	for i, sub := range subs {
		if sub.ID != items[i].ID || sub.Status != http.StatusCreated {
			msg := ""
			if sub.Error != nil {
				msg = ": " + sub.Error.Error()
			}
			return fmt.Errorf("submit %s in a batch: answered %s with status %d%s, want 201 (a new job)", items[i].ID, sub.ID, sub.Status, msg)
		}
	}
	return nil
}

// cleanup cancels the jobs of a failed run that are still queued (or
// leased: its workers reported their leases failed, unless that failed too),
// so that the next run finds none queued, and adds to err what it did.
func (b *bench) cleanup(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ids []string
	for _, state := range []string{"queued", "acquired", "running"} {
		js, lerr := b.admin.Jobs(ctx, state, benchKind)
		if lerr != nil {
			return fmt.Errorf("%w (and listing the jobs left %s: %v)", err, state, lerr)
		}
		for _, j := range js {
			if b.jobIndex(j.ID) >= 0 {
				ids = append(ids, j.ID)
			}
		}
	}
	if len(ids) == 0 {
		return err
	}
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range min(32, len(ids)) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(ids)) && failed.Load() == nil; i = next.Add(1) - 1 {
				if _, cerr := b.admin.Cancel(ctx, ids[i]); cerr != nil {
					cerr = fmt.Errorf("cancelling job %s: %w", ids[i], cerr)
					failed.CompareAndSwap(nil, &cerr)
				}
			}
		})
	}
	wg.Wait()
	if cerr := failed.Load(); cerr != nil {
		return fmt.Errorf("%w (and %v)", err, *cerr)
	}
	return fmt.Errorf("%w (cancelled the run's %d jobs left queued or leased)", err, len(ids))
}

// check reads back the log after seq0: every job of the run must have
// exactly one lease.reported, succeeded, and the run one accepted report per
// job, no refused report, no lost heartbeat. Its error names the jobs.
func (b *bench) check(ctx context.Context) (string, error) {
	reported := make([]int, b.jobs)
	var stale []string
	var bad []string // reported with another outcome
	for _, typ := range []string{"lease.reported", "lease.stale_report"} {
		q := api.EventQuery{Type: typ, After: b.seq0, Limit: 1000}
		for {
			page, err := b.admin.Events(ctx, q)
			if err != nil {
				return "", fmt.Errorf("bench: check: read %s events: %w", typ, err)
			}
			for _, e := range page.Events {
				i := b.jobIndex(e.Job)
				switch {
				case i < 0:
				case typ == "lease.stale_report":
					stale = append(stale, e.Job)
				case e.Outcome != "succeeded":
					bad = append(bad, e.Job+" ("+e.Outcome+")")
					reported[i]++
				default:
					reported[i]++
				}
			}
			if page.Next == 0 { // the last page
				break
			}
			q.After = page.Next
		}
	}
	return checkCounts(b, reported, stale, bad)
}

// checkCounts judges what check read and what the run counted.
func checkCounts(b *bench, reported []int, stale, bad []string) (string, error) {
	var missing, twice, acc []string
	for i, n := range reported {
		switch {
		case n == 0:
			missing = append(missing, b.jobID(i))
		case n > 1:
			twice = append(twice, fmt.Sprintf("%s (%d)", b.jobID(i), n))
		}
		if a := b.accepted[i].Load(); a != 1 {
			acc = append(acc, fmt.Sprintf("%s (%d)", b.jobID(i), a))
		}
	}
	var problems []string
	add := func(what string, jobs []string) {
		if len(jobs) > 0 {
			problems = append(problems, fmt.Sprintf("%d %s: %s", len(jobs), what, names(jobs)))
		}
	}
	add("jobs with no lease.reported", missing)
	add("jobs with more than one lease.reported", twice)
	add("jobs reported with an outcome other than succeeded", bad)
	add("stale reports", stale)
	add("jobs whose accepted reports in this run were not one", acc)
	if n := b.rejected.Load(); n > 0 {
		problems = append(problems, fmt.Sprintf("%d reports refused by the token check", n))
	}
	if n := b.lost.Load(); n > 0 {
		problems = append(problems, fmt.Sprintf("%d heartbeats not answered continue", n))
	}
	if len(problems) > 0 {
		return "", fmt.Errorf("bench: check failed: %s", strings.Join(problems, "; "))
	}
	return fmt.Sprintf("%d/%d jobs reported exactly once (succeeded), each with one accepted report; 0 stale reports", b.jobs, b.jobs), nil
}

// names lists up to 10 names and how many more.
func names(s []string) string {
	slices.Sort(s)
	if len(s) <= 10 {
		return strings.Join(s, ", ")
	}
	return strings.Join(s[:10], ", ") + fmt.Sprintf(" and %d more", len(s)-10)
}
