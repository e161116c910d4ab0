// Package workload is the lease-lifecycle workload that `leaselog bench`
// runs against a daemon (docs/workload.md), and its exactly-once check.
//
// [Run] submits the jobs with one client ([Admin]) and takes each through
// acquire, start, heartbeats and report with another ([Worker]), timing every
// call; then it reads the log back from where it stood before the run: each
// job must have exactly one lease.reported (succeeded) and no stale report.
// The [Protocol] says which calls a job takes: one per step, or those that
// save round trips. The command owns the flags, the clients and the output
// ([Result.WriteTable], or the [Result] as JSON).
//
// The scale workloads of `leaselog bench --mode`: [Density] holds many live
// leases and heartbeats them every renew; [Million] times acquires and
// pages with many jobs queued ([SubmitBatches]). The command runs their
// daemon and reads its metrics.
package workload

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaselog/leaselog/api"
)

// Admin is what the workload asks of the daemon as an admin (submit,
// cancel) and a reader (the check); *api.Client is one.
type Admin interface {
	Submit(ctx context.Context, s api.Submit) (api.Job, bool, error)
	SubmitBatch(ctx context.Context, jobs []api.Submit) ([]api.Submitted, error)
	Jobs(ctx context.Context, state, kind string) ([]api.Job, error)
	Cancel(ctx context.Context, id string) (api.Job, error)
	Events(ctx context.Context, q api.EventQuery) (api.Events, error)
	Health(ctx context.Context) (api.Health, error)
}

// Worker is what the workload asks of the daemon as a worker; *api.Client
// is one.
type Worker interface {
	Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error)
	AcquireStart(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error)
	Start(ctx context.Context, worker string, lease uint64) (api.Lease, error)
	Heartbeat(ctx context.Context, worker string, leases []uint64) (api.HeartbeatReply, error)
	Report(ctx context.Context, lease uint64, r api.Report) (api.ReportReply, error)
	ReportNext(ctx context.Context, lease uint64, r api.Report, next api.Next) (api.ReportReply, error)
}

// Config is one run of the workload.
type Config struct {
	Admin  Admin
	Worker Worker
	// Jobs to take through their lifecycle, by Workers goroutines (one lease
	// each at a time), submitted by Enqueuers goroutines; each lease is
	// heartbeated Heartbeats times between its start and its report.
	Jobs, Workers, Enqueuers, Heartbeats int
	Protocol                             Protocol
	// Prefix makes the job ids, Prefix-N, and the workers' ids,
	// Prefix-wNNN: new for each run, so that a daemon with history is fine.
	Prefix string
	// WorkerID, if set, is the id every worker acts as (a worker token's);
	// else each has its own.
	WorkerID string
	// HTTP names the clients' protocol in the Result (http1, h2c, +session).
	HTTP string
	// Progress, if set, is called with the jobs done and submitted every
	// 250 ms during the run, and once at its end.
	Progress func(done, submitted int64)
}

// Kind is the kind of the jobs the workload submits (as the shared peers
// harness's leaselog peer does); the daemon runs nothing for them.
const Kind = "evaluation"

// acquireWait is the long poll of one acquire (the peers harness waits 5 s;
// the wait only counts when nothing is queued, and a stopped run waits for
// the calls it sent).
const acquireWait = 2 * time.Second

// Run runs the workload on the daemon, then checks what it left in the log.
// A run that fails (a call fails, or ctx is done) returns no Result and its
// error, once it has reported the leases it holds failed and cancelled its
// jobs left queued. A run whose check fails returns its Result and the
// check's error, which names the jobs.
func Run(ctx context.Context, c Config) (*Result, error) {
	b := &bench{Config: c}
	elapsed, err := b.run(ctx)
	if c.Progress != nil {
		c.Progress(b.done.Load(), b.submitted.Load())
	}
	if err != nil {
		return nil, err
	}
	verified, err := b.check(ctx)
	r := b.result(elapsed, verified, err)
	return &r, err
}

// bench is one run of the workload and what it counted.
type bench struct {
	Config
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

func (b *bench) jobID(i int) string { return b.Prefix + "-" + strconv.Itoa(i) }

// jobIndex is the number of one of this run's job ids, or -1.
func (b *bench) jobIndex(id string) int {
	rest, ok := strings.CutPrefix(id, b.Prefix+"-")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || i >= b.Jobs || b.jobID(i) != id {
		return -1
	}
	return i
}

func (b *bench) workerName(i int) string {
	if b.WorkerID != "" {
		return b.WorkerID
	}
	return fmt.Sprintf("%s-w%03d", b.Prefix, i)
}

// record keeps one goroutine's samples.
func (b *bench) record(samples *[4][]time.Duration) {
	b.latMu.Lock()
	defer b.latMu.Unlock()
	for op := range samples {
		b.lat[op] = append(b.lat[op], samples[op]...)
	}
}
