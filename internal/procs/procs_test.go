package procs

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestPolicy(t *testing.T) {
	// Each step: the window's peak, whether the process was low, and the
	// decision expected.
	type step struct {
		peak int64
		low  bool
		want Decision
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"down after Quiet quiet windows", []step{{1, false, Stay}, {0, false, Stay}, {1, false, Down}}},
		{"a busy window starts the count again", []step{{1, false, Stay}, {1, false, Stay}, {2, false, Stay}, {1, false, Stay}, {1, false, Stay}, {1, false, Down}}},
		{"up after one busy window", []step{{2, true, Up}}},
		{"low stays low while quiet", []step{{1, true, Stay}, {1, true, Stay}, {0, true, Stay}, {1, true, Stay}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{Quiet: 3}
			for i, s := range tc.steps {
				if got := p.Next(s.peak, s.low); got != s.want {
					t.Fatalf("step %d (peak %d, low %v): %v, want %v", i, s.peak, s.low, got, s.want)
				}
			}
		})
	}
}

func TestLoadPeak(t *testing.T) {
	l := NewLoad()
	l.Enter()
	l.Enter()
	l.Leave()
	if got := l.takePeak(); got != 2 {
		t.Fatalf("peak of a window with two in flight: %d", got)
	}
	// The next window starts at what is in flight: one.
	if got := l.takePeak(); got != 1 {
		t.Fatalf("peak of a window with one in flight throughout: %d", got)
	}
	l.Leave()
	l.takePeak()
	if got := l.takePeak(); got != 0 {
		t.Fatalf("peak of an idle window: %d", got)
	}

	// Concurrent entries: the peak is never below what was in flight at
	// once, never above the goroutines, and nothing is left counted.
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			<-start
			for range 1000 {
				l.Enter()
				l.Leave()
			}
		})
	}
	l.Enter() // held across: every other entry makes at least two
	close(start)
	wg.Wait()
	if got := l.takePeak(); got < 2 || got > 9 {
		t.Fatalf("peak %d, want 2 to 9", got)
	}
	l.Leave()
	if got := l.busy.Load(); got != 0 {
		t.Fatalf("%d left in flight", got)
	}
}

// governed is a Governor run by a test: its looks are the test's ticks, and
// each GOMAXPROCS it sets is handed to the test, which must take it.
type governed struct {
	t      *testing.T
	g      *Governor
	tick   chan time.Time
	sets   chan int
	cancel context.CancelFunc
	done   chan struct{}
}

func govern(t *testing.T, quiet int) *governed {
	tick, sets := make(chan time.Time), make(chan int)
	ctx, cancel := context.WithCancel(context.Background())
	gv := &governed{t: t, tick: tick, sets: sets, cancel: cancel, done: make(chan struct{})}
	gv.g = &Governor{Load: NewLoad(), Max: 4, Quiet: quiet, Tick: tick, Logger: zerolog.Nop(),
		Set: func(n int) int { sets <- n; return 0 }}
	go func() { defer close(gv.done); gv.g.Run(ctx) }()
	t.Cleanup(func() { gv.stop() })
	return gv
}

// stop ends the governor and returns what it set as it ended.
func (gv *governed) stop() []int {
	gv.cancel()
	var set []int
	for {
		select {
		case n := <-gv.sets:
			set = append(set, n)
		case <-gv.done:
			return set
		}
	}
}

// look makes the governor look n times. A look it takes only when it is
// done with the one before: a Set the test did not expect holds it, and
// fails the test here.
func (gv *governed) look(n int) {
	gv.t.Helper()
	for range n {
		select {
		case gv.tick <- time.Time{}:
		case n := <-gv.sets:
			gv.t.Fatalf("GOMAXPROCS set to %d, unexpected", n)
		}
	}
}

// set waits for the governor to set GOMAXPROCS, to want.
func (gv *governed) set(want int) {
	gv.t.Helper()
	select {
	case n := <-gv.sets:
		if n != want {
			gv.t.Fatalf("GOMAXPROCS set to %d, want %d", n, want)
		}
	case <-time.After(10 * time.Second):
		gv.t.Fatalf("GOMAXPROCS not set to %d", want)
	}
}

func TestGovernorFollowsTheLoad(t *testing.T) {
	gv := govern(t, 3)
	l := gv.g.Load

	l.Enter() // one piece of work, however long, is quiet
	gv.look(2)
	gv.look(1) // the third quiet window
	gv.set(1)

	l.Enter() // a second in flight: up at once, with no look
	gv.set(4)
	l.Leave()

	gv.look(1) // the window that saw two
	gv.look(3)
	gv.set(1)
	l.Leave()
	gv.look(5) // idle: stays down

	// From idle, two at once: the kick again, and down again after the
	// quiet windows. (Work that comes and goes within a window is the
	// Load's to see: TestLoadPeak. Here the test cannot tell which window
	// an entry falls in but by a Set: a tick is taken before its look.)
	l.Enter()
	l.Enter()
	gv.set(4)
	l.Leave()
	l.Leave()
	gv.look(1) // the window that saw two
	gv.look(3)
	gv.set(1)
}

func TestGovernorEndsUp(t *testing.T) {
	gv := govern(t, 1)
	gv.look(1)
	gv.set(1)
	if got := gv.stop(); len(got) != 1 || got[0] != 4 {
		t.Fatalf("a governor that ends down set %v, want [4]", got)
	}
	// One that ends up sets nothing.
	gv = govern(t, 5)
	gv.look(1)
	if got := gv.stop(); len(got) != 0 {
		t.Fatalf("a governor that ends up set %v", got)
	}
}

func TestForDaemonLeavesTheUsersGOMAXPROCS(t *testing.T) {
	t.Setenv("GOMAXPROCS", "2")
	if g := ForDaemon(zerolog.Nop()); g != nil {
		t.Fatal("a governor over the user's GOMAXPROCS")
	}
}
