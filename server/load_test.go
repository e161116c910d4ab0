package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/server"
)

// load records what a server counts as work (Options.Load): what is in
// flight, and the most ever at once.
type load struct {
	mu       sync.Mutex
	in, peak int
	entered  int
	during   func(in int) // told of each entry, with what is then in flight
}

func (l *load) Enter() {
	l.mu.Lock()
	l.in++
	l.entered++
	l.peak = max(l.peak, l.in)
	in, during := l.in, l.during
	l.mu.Unlock()
	if during != nil {
		during(in)
	}
}

func (l *load) Leave() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.in--
}

func (l *load) counts() (in, peak, entered int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.in, l.peak, l.entered
}

// TestLoadCountsWorkNotWaits: a call is work from its start to its answer,
// over HTTP and in a session alike; a long poll waiting, a session between
// its frames and an event stream are not.
func TestLoadCountsWorkNotWaits(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			l := &load{}
			waiting := make(chan struct{}, 1)
			f := newFixtureHooked(t, server.Options{Load: l}, func(s *server.Server) {
				server.SetWaitHook(s, func(ctx context.Context) context.Context {
					select {
					case waiting <- struct{}{}:
					default: // told once is enough
					}
					return ctx
				})
			})
			ctx := context.Background()
			c, err := api.NewClient(f.ts.URL, "", tr.opts...)
			f.must(err)
			st := f.openStream("", nil)
			defer st.close()

			// A long poll that waits: while it does, nothing is in flight,
			// and the submit that ends its wait is one call at a time.
			got := make(chan []api.Grant, 1)
			go func() {
				gs, err := c.Acquire(ctx, "w1", 1, 30*time.Second)
				if err != nil {
					t.Error(err)
				}
				got <- gs
			}()
			<-waiting
			l.mu.Lock()
			l.during = func(in int) {
				if in != 1 {
					t.Errorf("%d in flight while a long poll waits", in)
				}
			}
			l.mu.Unlock()
			if _, _, err := c.Submit(ctx, api.Submit{ID: "j1", Kind: "run", Spec: []byte(`{"run":"true"}`)}); err != nil {
				t.Fatal(err)
			}
			gs := <-got
			if len(gs) != 1 {
				t.Fatalf("acquired %v", gs)
			}
			if _, err := c.Heartbeat(ctx, "w1", []uint64{gs[0].Lease}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Report(ctx, gs[0].Lease, api.Report{Worker: "w1", Outcome: "succeeded"}); err != nil {
				t.Fatal(err)
			}
			// A session answers a frame before its call leaves: wait for
			// the report's to.
			eventually(t, "every call left", func() bool { in, _, _ := l.counts(); return in == 0 })
			in, peak, entered := l.counts()
			// submit, heartbeat, report; the acquire a long poll
			if in != 0 || peak != 1 || entered != 3 {
				t.Fatalf("in flight %d, at most %d, entered %d: want 0, 1 and 3", in, peak, entered)
			}
		})
	}
}
