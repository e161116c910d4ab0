// Package procs runs the daemon on one processor (GOMAXPROCS 1) while it
// does one piece of work at a time, and on all of them from the moment it
// does two.
//
// Why: a lone worker's call is a chain of goroutines handing work on — the
// session's reader commits, Pebble's WAL writer syncs, the reader answers —
// each hand-off a wake-up. With Ps idle, the Go runtime wakes a thread on
// another CPU for each (runtime.wakep), and on a virtual machine whose CPUs
// the host also gives to others that wake is slow and may take the
// goroutine over: its delays make a lone worker's latency and tail. With
// one P nothing is woken and the chain runs on one thread. Under load the
// reverse holds — one P would hold every call behind the one syncing — so
// the governor goes back to all of them as soon as a second piece of work
// is in flight, without waiting for its next look.
//
// Load counts the work in flight (the calls the server serves, the flushes
// and compactions of the log); Governor reads it and sets GOMAXPROCS. A
// user's own GOMAXPROCS (the environment variable) is never overridden:
// ForDaemon then returns no governor.
package procs

import (
	"context"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Load counts the work in flight. Make one with NewLoad.
type Load struct {
	busy atomic.Int64
	peak atomic.Int64 // the most in flight at once since the governor last looked
	low  atomic.Bool  // the governor holds the process on one P
	kick chan struct{}
}

// NewLoad returns a Load for a Governor.
func NewLoad() *Load { return &Load{kick: make(chan struct{}, 1)} }

// Enter counts a piece of work begun; Leave must follow it.
func (l *Load) Enter() {
	n := l.busy.Add(1)
	for p := l.peak.Load(); n > p && !l.peak.CompareAndSwap(p, n); p = l.peak.Load() {
	}
	if n > 1 && l.low.Load() {
		select {
		case l.kick <- struct{}{}: // up now, not at the governor's next look
		default:
		}
	}
}

// Leave counts a piece of work ended.
func (l *Load) Leave() { l.busy.Add(-1) }

// takePeak returns the most work in flight at once since its last call,
// and starts the next window at what is in flight now.
func (l *Load) takePeak() int64 { return l.peak.Swap(l.busy.Load()) }

// Decision is what the governor does after a look.
type Decision int

const (
	Stay Decision = iota
	Down          // to one P
	Up            // to all of them
)

// Policy is the governor's rule, apart from its loop: down after Quiet
// windows in a row in which at most one piece of work was in flight at
// once, up after any in which more were.
type Policy struct {
	Quiet int
	quiet int // quiet windows in a row so far
}

// Next decides after a window whose peak was peak, the process being on
// one P (low) or on all of them.
func (p *Policy) Next(peak int64, low bool) Decision {
	if peak > 1 {
		p.quiet = 0
		if low {
			return Up
		}
		return Stay
	}
	p.quiet++
	if !low && p.quiet >= p.Quiet {
		return Down
	}
	return Stay
}

// Window and Quiet are the daemon's governor's: it looks ten times a
// second, and goes down after a second of one piece of work at a time.
const (
	Window = 100 * time.Millisecond
	Quiet  = 10
)

// Governor sets GOMAXPROCS by a Load.
type Governor struct {
	Load  *Load
	Max   int // the Ps under load: GOMAXPROCS as the process started
	Quiet int // windows, Policy.Quiet
	// Tick is when it looks: a test's ticks; nil looks every Window.
	Tick <-chan time.Time
	// Set sets GOMAXPROCS: runtime.GOMAXPROCS, or a test's recorder.
	Set    func(n int) int
	Logger zerolog.Logger // each change, at debug level
}

// ForDaemon returns the governor of the daemon's process; nil when there
// is nothing to govern: one CPU, or a GOMAXPROCS the user set.
func ForDaemon(logger zerolog.Logger) *Governor {
	n := runtime.GOMAXPROCS(0)
	if _, set := os.LookupEnv("GOMAXPROCS"); set || n < 2 {
		return nil
	}
	return &Governor{Load: NewLoad(), Max: n, Quiet: Quiet, Set: runtime.GOMAXPROCS, Logger: logger}
}

// Run governs until ctx ends, and leaves the process on Max Ps.
func (g *Governor) Run(ctx context.Context) {
	tick := g.Tick
	if tick == nil {
		t := time.NewTicker(Window)
		defer t.Stop()
		tick = t.C
	}
	policy := Policy{Quiet: g.Quiet}
	low := false
	apply := func(d Decision) {
		switch d {
		case Down:
			// Seen low before the count is read again: a piece of work
			// entering in between either kicks or is counted here.
			g.Load.low.Store(true)
			if g.Load.busy.Load() > 1 {
				g.Load.low.Store(false)
				return
			}
			low = true
			g.Set(1)
			g.Logger.Debug().Int("gomaxprocs", 1).Msg("one piece of work at a time: one P")
		case Up:
			low = false
			g.Load.low.Store(false)
			g.Set(g.Max)
			g.Logger.Debug().Int("gomaxprocs", g.Max).Msg("work in parallel: every P")
		}
	}
	defer func() {
		if low {
			apply(Up)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.Load.kick:
		case <-tick:
		}
		apply(policy.Next(g.Load.takePeak(), low))
	}
}
