package jetstream

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/linearize"
	"github.com/leaselog/leaselog/lease"
)

// daemons is the daemons of a scenario as clients given the list of them
// reach them (docs/cluster.md §3): each down (its connection refused), a
// standby (503, it processes nothing) or serving its lease.Service in
// process (daemonOf). A client of it (client) follows api/servers.go's rule,
// so that the load of a scenario runs across its faults: a call goes to the
// daemon that answered the client last; refused or answered by a standby,
// it goes to the next daemon of the list, each once per call (with two
// daemons the next is the one a standby names); a call a daemon took is
// that daemon's to answer, or, killed, never answered.
type daemons struct {
	mu   sync.Mutex
	idle *sync.Cond // signalled when a call to a daemon returns
	ends []daemonEnd
	// changed is closed, and replaced, when a daemon changes state: a
	// client refused by all waits on it before it calls again (the
	// worker's retry, timed by what it waits for rather than a backoff).
	changed chan struct{}
}

type daemonEnd struct {
	svc       *lease.Service // nil: not serving
	listening bool           // serving or a standby
	kills     int            // a call that began before a kill is never answered
	inFlight  int            // calls inside svc
}

// The errors of a call no daemon answered: the api client's, as a worker
// sees them (api.Retryable: unknown to the recorder).
var (
	errRefused    = errors.New("connect: connection refused")
	errAnswerLost = errors.New("connection reset by peer: the daemon was killed with the call in flight")
)

func newDaemons(n int) *daemons {
	d := &daemons{ends: make([]daemonEnd, n), changed: make(chan struct{})}
	d.idle = sync.NewCond(&d.mu)
	return d
}

// set changes daemon i's state, under d.mu, and wakes the clients waiting.
func (d *daemons) set(i int, f func(e *daemonEnd)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(&d.ends[i])
	close(d.changed)
	d.changed = make(chan struct{})
}

// serve makes daemon i serve svc (a daemon that started, or took over).
func (d *daemons) serve(i int, svc *lease.Service) {
	d.set(i, func(e *daemonEnd) { e.svc, e.listening = svc, true })
}

// standby makes daemon i answer as a standby.
func (d *daemons) standby(i int) {
	d.set(i, func(e *daemonEnd) { e.svc, e.listening = nil, true })
}

// exit makes daemon i stop listening, as a daemon that stops (a deposed
// one, or one that fail-stopped): the calls it took are answered.
func (d *daemons) exit(i int) {
	d.set(i, func(e *daemonEnd) { e.svc, e.listening = nil, false })
}

// kill kills daemon i as a SIGKILL would, once calls are in flight inside
// it: those are never answered. It returns when they have returned inside
// the service, so that the killed daemon appends nothing after the kill
// (what a dead process cannot do; in process, its goroutines would).
func (d *daemons) kill(t *testing.T, i int) {
	t.Helper()
	waitFor(t, 5*time.Second, "a call in flight at the daemon to kill", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.ends[i].inFlight == 0 {
			return false
		}
		t.Logf("daemon %d killed with %d calls in flight", i, d.ends[i].inFlight)
		e := &d.ends[i]
		e.svc, e.listening = nil, false
		e.kills++
		close(d.changed)
		d.changed = make(chan struct{})
		for e.inFlight > 0 {
			d.idle.Wait()
		}
		return true
	})
}

// inFlight returns the number of calls in flight inside daemon i.
func (d *daemons) inFlight(i int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ends[i].inFlight
}

// changes returns a channel closed at the next change of any daemon's state.
func (d *daemons) changes() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.changed
}

// client returns a client of the daemons: one process's view, which
// remembers the daemon that answered it last.
func (d *daemons) client() linearize.Daemon { return &failover{d: d} }

type failover struct {
	d   *daemons
	cur int // only its caller's goroutine calls it
}

// do sends call by the rule (see daemons).
func (c *failover) do(call func(linearize.Daemon) error) error {
	d := c.d
	tried := make([]bool, len(d.ends))
	var standby error
	for i := c.cur; ; {
		tried[i] = true
		d.mu.Lock()
		e := &d.ends[i]
		svc, listening, kills := e.svc, e.listening, e.kills
		if svc != nil {
			e.inFlight++
		}
		d.mu.Unlock()
		if svc != nil {
			err := call(daemonOf(svc))
			d.mu.Lock()
			e.inFlight--
			lost := e.kills != kills
			d.idle.Broadcast()
			d.mu.Unlock()
			if lost {
				return errAnswerLost
			}
			if errors.Is(err, lease.ErrFailed) {
				d.exit(i) // the daemon fail-stops: its process exits
			}
			c.cur = i
			return err
		}
		if listening {
			standby = &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable,
				Message: "standby: this daemon waits to take over the stream"}
		}
		next := -1
		for k := 1; k < len(d.ends) && next < 0; k++ {
			if j := (i + k) % len(d.ends); !tried[j] {
				next = j
			}
		}
		if next < 0 {
			if standby != nil {
				return standby
			}
			return &api.ServerError{Server: "daemon", Err: errRefused}
		}
		i = next
	}
}

func (c *failover) Submit(ctx context.Context, s api.Submit) (j api.Job, created bool, err error) {
	err = c.do(func(d linearize.Daemon) (err error) { j, created, err = d.Submit(ctx, s); return err })
	return j, created, err
}

func (c *failover) Job(ctx context.Context, id string) (j api.Job, err error) {
	err = c.do(func(d linearize.Daemon) (err error) { j, err = d.Job(ctx, id); return err })
	return j, err
}

func (c *failover) Cancel(ctx context.Context, id string) (j api.Job, err error) {
	err = c.do(func(d linearize.Daemon) (err error) { j, err = d.Cancel(ctx, id); return err })
	return j, err
}

func (c *failover) Kill(ctx context.Context, id string) (j api.Job, err error) {
	err = c.do(func(d linearize.Daemon) (err error) { j, err = d.Kill(ctx, id); return err })
	return j, err
}

func (c *failover) Acquire(ctx context.Context, worker string, max int, wait time.Duration) (gs []api.Grant, err error) {
	err = c.do(func(d linearize.Daemon) (err error) { gs, err = d.Acquire(ctx, worker, max, wait); return err })
	return gs, err
}

func (c *failover) Heartbeat(ctx context.Context, worker string, leases []uint64) (h api.HeartbeatReply, err error) {
	err = c.do(func(d linearize.Daemon) (err error) { h, err = d.Heartbeat(ctx, worker, leases); return err })
	return h, err
}

func (c *failover) WorkerLeases(ctx context.Context, worker string) (gs []api.Grant, err error) {
	err = c.do(func(d linearize.Daemon) (err error) { gs, err = d.WorkerLeases(ctx, worker); return err })
	return gs, err
}

func (c *failover) Start(ctx context.Context, worker string, lease uint64) (l api.Lease, err error) {
	err = c.do(func(d linearize.Daemon) (err error) { l, err = d.Start(ctx, worker, lease); return err })
	return l, err
}

func (c *failover) Report(ctx context.Context, lease uint64, r api.Report) (a api.ReportReply, err error) {
	err = c.do(func(d linearize.Daemon) (err error) { a, err = d.Report(ctx, lease, r); return err })
	return a, err
}
