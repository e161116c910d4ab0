package worker

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
)

// refusingDaemon refuses the worker's token on one kind of call, counting
// the calls of that kind.
type refusingDaemon struct {
	*fakeDaemon
	call string // acquire, heartbeat or leases
	err  error
	// after, if set, holds the refusals until it is closed: the calls
	// before are answered (the job must be running when the refusal comes).
	after chan struct{}

	mu    sync.Mutex
	calls int
}

func (d *refusingDaemon) refuse(call string) error {
	if call != d.call {
		return nil
	}
	if d.after != nil {
		select {
		case <-d.after:
		default:
			return nil
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	return d.err
}

func (d *refusingDaemon) Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error) {
	if err := d.refuse("acquire"); err != nil {
		return nil, err
	}
	return d.fakeDaemon.Acquire(ctx, worker, max, wait)
}

func (d *refusingDaemon) Heartbeat(ctx context.Context, worker string, leases []uint64) (api.HeartbeatReply, error) {
	if err := d.refuse("heartbeat"); err != nil {
		return api.HeartbeatReply{}, err
	}
	return d.fakeDaemon.Heartbeat(ctx, worker, leases)
}

func (d *refusingDaemon) WorkerLeases(ctx context.Context, worker string) ([]api.Grant, error) {
	if err := d.refuse("leases"); err != nil {
		return nil, err
	}
	return d.fakeDaemon.WorkerLeases(ctx, worker)
}

// TestRefusedTokenStopsTheWorker: a 401 or a 403 on the worker's own calls
// — its token is unknown, or not this worker's — is not retried: Run
// returns at once an error wrapping ErrRefused and the daemon's answer,
// after one refused call, and leaves the job it holds running, as a stop
// does.
func TestRefusedTokenStopsTheWorker(t *testing.T) {
	unknown := &api.Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthorized, Message: "unknown token"}
	notIts := &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Message: `needs worker "w1"'s token`}
	for _, tc := range []struct {
		name, call string
		err        *api.Error
		holding    bool // a job runs when the refusal comes
	}{
		{"acquire, an admin's token", "acquire", notIts, false},
		{"acquire, an unknown token", "acquire", unknown, false},
		{"heartbeat, holding a job", "heartbeat", notIts, true},
		{"re-attach, an unknown token", "leases", unknown, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &refusingDaemon{fakeDaemon: newFakeDaemon(), call: tc.call, err: tc.err}
			e := newFakeExecutor()
			if tc.holding {
				d.queue = []api.Grant{grant(3, "j1")}
				d.after = make(chan struct{})
			}
			_, _, done := newTestWorker(t, d, e, nil)
			var run *fakeRun
			if tc.holding {
				run = receive(t, e.started, "the job's start")
				close(d.after) // a heartbeat before the start would stop the worker before it
			}
			err := receive(t, done, "Run's return")
			done <- err // for newTestWorker's cleanup
			var got *api.Error
			if !errors.Is(err, ErrRefused) || !errors.As(err, &got) || got != tc.err {
				t.Fatalf("Run: %v; want ErrRefused wrapping %v", err, tc.err)
			}
			d.mu.Lock()
			calls := d.calls
			d.mu.Unlock()
			if calls != 1 {
				t.Fatalf("%d %s calls refused; want 1: a refused token is not retried", calls, tc.call)
			}
			if run != nil {
				run.mu.Lock()
				stops := len(run.stops)
				run.mu.Unlock()
				if stops != 0 {
					t.Fatal("the job was stopped: a refused token stops the worker, not its jobs")
				}
			}
		})
	}
}
