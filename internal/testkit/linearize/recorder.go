package linearize

import (
	"context"
	"sync"
	"time"

	"github.com/leaselog/leaselog/api"
)

// Daemon is what a Recorder wraps: the calls of the daemon's API that the
// model judges, as the Go client (*api.Client) makes them. A test that
// drives a lease.Service directly adapts it (as ops.Daemon does for the
// worker's calls).
type Daemon interface {
	Submit(ctx context.Context, s api.Submit) (api.Job, bool, error)
	Job(ctx context.Context, id string) (api.Job, error)
	Cancel(ctx context.Context, id string) (api.Job, error)
	Kill(ctx context.Context, id string) (api.Job, error)
	Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error)
	Heartbeat(ctx context.Context, worker string, leases []uint64) (api.HeartbeatReply, error)
	WorkerLeases(ctx context.Context, worker string) ([]api.Grant, error)
	Start(ctx context.Context, worker string, lease uint64) (api.Lease, error)
	Report(ctx context.Context, lease uint64, r api.Report) (api.ReportReply, error)
}

// Recorder records the calls a real test makes to real daemons, each with
// its call and return times on the process's monotonic clock, what it asked
// and what it was answered, for Operations to turn into porcupine
// operations with the finished stream's events. It is safe for concurrent
// use: every goroutine of a test may call through it.
//
// Every call that touches a job must go through it, from the job's
// submission on: the model cannot place an operation on a job it never saw
// submitted.
type Recorder struct {
	base time.Time

	mu      sync.Mutex
	clients []string // porcupine client ids; 0 is the sweeper
	calls   []*record
}

// record is one call: what it asked, when, and what it was answered. ret
// is -1 while it is in flight.
type record struct {
	client    int
	req       Req
	call, ret int64
	reply     any
	err       error
}

// NewRecorder returns a recorder whose clock starts now.
func NewRecorder() *Recorder {
	return &Recorder{base: time.Now(), clients: []string{"sweeper"}}
}

// Client returns d, every call through it recorded as one of client name
// (a porcupine client: its name shows in the visualization). The same name
// is the same client, whichever daemon it calls: a worker that moves to the
// daemon that took over stays one client.
func (r *Recorder) Client(name string, d Daemon) Daemon {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := -1
	for i, c := range r.clients {
		if c == name && i > 0 {
			id = i
		}
	}
	if id < 0 {
		r.clients = append(r.clients, name)
		id = len(r.clients) - 1
	}
	return recorded{r: r, client: id, d: d}
}

func (r *Recorder) now() int64 { return int64(time.Since(r.base)) }

func (r *Recorder) begin(client int, req Req) *record {
	c := &record{client: client, req: req, ret: -1}
	c.call = r.now()
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	return c
}

func (r *Recorder) end(c *record, reply any, err error) {
	ret := r.now()
	r.mu.Lock()
	c.ret, c.reply, c.err = ret, reply, err
	r.mu.Unlock()
}

// recorded is a Daemon whose calls a Recorder records.
type recorded struct {
	r      *Recorder
	client int
	d      Daemon
}

func (c recorded) Submit(ctx context.Context, s api.Submit) (api.Job, bool, error) {
	rec := c.r.begin(c.client, Req{Op: OpSubmit, Job: s.ID, Kind: s.Kind, Spec: string(s.Spec), MaxRequeues: s.MaxRequeues})
	j, created, err := c.d.Submit(ctx, s)
	c.r.end(rec, created, err)
	return j, created, err
}

func (c recorded) Job(ctx context.Context, id string) (api.Job, error) {
	rec := c.r.begin(c.client, Req{Op: OpRead, Job: id})
	j, err := c.d.Job(ctx, id)
	c.r.end(rec, j, err)
	return j, err
}

func (c recorded) Cancel(ctx context.Context, id string) (api.Job, error) {
	rec := c.r.begin(c.client, Req{Op: OpCancel, Job: id})
	j, err := c.d.Cancel(ctx, id)
	c.r.end(rec, j, err)
	return j, err
}

func (c recorded) Kill(ctx context.Context, id string) (api.Job, error) {
	rec := c.r.begin(c.client, Req{Op: OpKill, Job: id})
	j, err := c.d.Kill(ctx, id)
	c.r.end(rec, j, err)
	return j, err
}

func (c recorded) Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error) {
	rec := c.r.begin(c.client, Req{Op: OpAcquire, Worker: worker, Max: max})
	gs, err := c.d.Acquire(ctx, worker, max, wait)
	c.r.end(rec, gs, err)
	return gs, err
}

func (c recorded) Heartbeat(ctx context.Context, worker string, leases []uint64) (api.HeartbeatReply, error) {
	rec := c.r.begin(c.client, Req{Op: OpBeat, Worker: worker})
	h, err := c.d.Heartbeat(ctx, worker, leases)
	c.r.end(rec, h, err)
	return h, err
}

func (c recorded) WorkerLeases(ctx context.Context, worker string) ([]api.Grant, error) {
	rec := c.r.begin(c.client, Req{Op: OpHolds, Worker: worker})
	gs, err := c.d.WorkerLeases(ctx, worker)
	c.r.end(rec, gs, err)
	return gs, err
}

func (c recorded) Start(ctx context.Context, worker string, lease uint64) (api.Lease, error) {
	rec := c.r.begin(c.client, Req{Op: OpStart, Worker: worker, Lease: lease})
	l, err := c.d.Start(ctx, worker, lease)
	c.r.end(rec, l, err)
	return l, err
}

func (c recorded) Report(ctx context.Context, lease uint64, r api.Report) (api.ReportReply, error) {
	rec := c.r.begin(c.client, Req{Op: OpReport, Lease: lease, Report: r})
	a, err := c.d.Report(ctx, lease, r)
	c.r.end(rec, a, err)
	return a, err
}
