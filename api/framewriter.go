package api

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
)

// FrameWriter writes a session's frames, both sides' (the client's calls,
// the daemon's answers), coalescing: a frame added while another goroutine
// writes goes out with that goroutine's next write, so that frames that are
// ready together take one system call, and none waits for a timer.
//
// Its backlog — the frames added and not yet taken by the connection, the
// write in progress included — may be bounded: Wait then holds its caller
// while the backlog is over the bound. The daemon waits so before it reads a
// session's next frame, so that a client that does not read its answers
// stops being read, rather than growing the daemon's memory.
type FrameWriter struct {
	write func([]byte) error // the connection's write
	limit int                // the backlog Wait lets pass; 0: no bound
	hold  atomic.Bool        // Wait must not pass: the backlog is over limit, or a write failed

	mu      sync.Mutex
	out     []byte        // frames waiting to be written
	spare   []byte        // the buffer written last, reused
	writing bool          // a goroutine is writing: it will take out too
	taking  int           // the bytes of the write in progress
	err     error         // the write that failed: every later frame is dropped
	room    chan struct{} // closed when the backlog is back within limit, or a write failed; nil while no one waits
}

// NewFrameWriter returns a FrameWriter that writes with write, whose Wait
// lets its caller pass while at most limit bytes wait to be written (0: no
// bound, Wait never waits).
func NewFrameWriter(write func([]byte) error, limit int) *FrameWriter {
	return &FrameWriter{write: write, limit: limit}
}

// Write adds a frame — add appends it to the buffer it is given — and, unless
// another goroutine is writing, writes what is waiting. busy says whether
// other calls are in flight on the session: frames that end together (the
// answers of one group commit, the next calls of the workers one read of
// answers woke) are then about to be added, and the writer yields once
// before each write so that they join it (a loopback write costs
// microseconds, a yield a fraction of one). Alone, it writes at once: a
// yield would queue it behind whatever else runs. The yield is a bet on the
// scheduler, kept where it was shown to pay: beside the same code without
// it, `leaselog bench --protocol session` at 64 workers has the lower
// heartbeat p50 (docs/performance.md, "Scheduling bets and the GOMAXPROCS
// governor, measured"). It returns the error of the write that failed, this
// one's or an earlier one's. Write never waits for room: a frame is added
// whatever the backlog (Wait is the bound).
func (w *FrameWriter) Write(add func([]byte) []byte, busy func() bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.out = add(w.out)
	w.checkLocked()
	if w.writing {
		return nil
	}
	w.writing = true
	for len(w.out) > 0 && w.err == nil {
		if busy() {
			w.mu.Unlock()
			runtime.Gosched()
			w.mu.Lock()
		}
		out := w.out
		w.out = w.spare[:0]
		w.taking = len(out)
		w.mu.Unlock()
		err := w.write(out)
		w.mu.Lock()
		w.taking = 0
		// The buffer written becomes the spare, unless too large to keep;
		// then the spare goes too, for w.out was taken from it: a spare
		// left as it was would be both the buffer the next write sends
		// and the one frames are added to meanwhile.
		if cap(out) <= 64<<10 {
			w.spare = out[:0]
		} else {
			w.spare = nil
		}
		if err != nil {
			w.err = err
		}
		w.checkLocked()
	}
	w.out = w.out[:0]
	w.writing = false
	return w.err
}

// Err is the error of the write that failed, nil while none has.
func (w *FrameWriter) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// checkLocked notes whether Wait must hold its caller, and wakes the
// waiter once the backlog is back within the bound, or a write failed.
func (w *FrameWriter) checkLocked() {
	if w.limit <= 0 {
		return
	}
	over := len(w.out)+w.taking > w.limit
	w.hold.Store(over || w.err != nil)
	if (!over || w.err != nil) && w.room != nil {
		close(w.room)
		w.room = nil
	}
}

// Wait returns at once while the backlog is within the bound (an atomic
// load: no lock). Over it, it waits until the writes have taken the backlog
// back within it (nil), a write failed (its error: the session is over), or
// ctx ended (ctx's error). Without a bound it never waits, and returns nil.
func (w *FrameWriter) Wait(ctx context.Context) error {
	if !w.hold.Load() {
		return nil
	}
	w.mu.Lock()
	for w.err == nil && w.hold.Load() {
		if w.room == nil {
			w.room = make(chan struct{})
		}
		room := w.room
		w.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
		w.mu.Lock()
	}
	err := w.err
	w.mu.Unlock()
	return err
}
