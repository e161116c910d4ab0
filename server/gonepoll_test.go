package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/server"
)

// TestGoneLongPollIsGrantedNothing: each transport tells the daemon that
// the caller of a long poll went — over HTTP/1.1 its connection is closed
// (net/http's read of it ends the request's context), over h2c its stream
// is reset, and a session, whose frames have no cancel of their own, is
// ended by its client — and the wait ends. A job submitted after that stays
// queued, no lease is left to the caller that went, and the next worker
// that asks gets the job at once.
func TestGoneLongPollIsGrantedNothing(t *testing.T) {
	for _, tr := range []struct {
		name  string
		opts  []api.ClientOption
		proto int // the HTTP version the calls came over
	}{
		{"http", []api.ClientOption{api.PlainCalls()}, 1},
		{"h2c", []api.ClientOption{api.H2C(), api.PlainCalls()}, 2},
		{"session", nil, 1}, // an upgrade of HTTP/1.1
	} {
		t.Run(tr.name, func(t *testing.T) {
			waiting := make(chan context.Context, 1)
			f := newH2CFixtureHooked(t, server.Options{}, 0, func(s *server.Server) {
				server.SetWaitHook(s, func(ctx context.Context) context.Context { waiting <- ctx; return ctx })
			})
			c, err := api.NewClient(f.ts.URL, "", tr.opts...)
			f.must(err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := c.Acquire(ctx, "w1", 1, time.Minute)
				done <- err
			}()
			wait := <-waiting
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("the acquire whose caller went: %v, want context.Canceled", err)
			}
			select {
			case <-wait.Done():
			case <-time.After(within):
				t.Fatal("the daemon still waits for a caller that went")
			}

			if !f.saw(tr.proto) {
				t.Fatalf("no call came over HTTP/%d", tr.proto)
			}

			f.submit("j1", event.KindRun)
			j, err := f.svc.Job(context.Background(), "j1")
			f.must(err)
			if j.State != fsm.Queued || j.Leases != 0 {
				t.Fatalf("j1 once submitted: %s, %d leases; want queued, none", j.State, j.Leases)
			}
			other, err := api.NewClient(f.ts.URL, "", api.PlainCalls())
			f.must(err)
			gs, err := other.Acquire(context.Background(), "w2", 1, 0)
			if err != nil || len(gs) != 1 || gs[0].Job.ID != "j1" {
				t.Fatalf("w2's acquire: %v %v, want j1 at once", gs, err)
			}
			held, err := f.svc.WorkerLeases(context.Background(), "w1")
			f.must(err)
			if len(held) != 0 {
				t.Fatalf("w1, whose caller went, holds %v", held)
			}
		})
	}
}
