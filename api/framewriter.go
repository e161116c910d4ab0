package api

import (
	"runtime"
	"sync"
)

// FrameWriter writes a session's frames, both sides' (the client's calls,
// the daemon's answers), coalescing: a frame added while another goroutine
// writes goes out with that goroutine's next write, so that frames that are
// ready together take one system call, and none waits for a timer.
type FrameWriter struct {
	write func([]byte) error // the connection's write

	mu      sync.Mutex
	out     []byte // frames waiting to be written
	spare   []byte // the buffer written last, reused
	writing bool   // a goroutine is writing: it will take out too
	err     error  // the write that failed: every later frame is dropped
}

// NewFrameWriter returns a FrameWriter that writes with write.
func NewFrameWriter(write func([]byte) error) *FrameWriter {
	return &FrameWriter{write: write}
}

// Write adds a frame — add appends it to the buffer it is given — and, unless
// another goroutine is writing, writes what is waiting. busy says whether
// other calls are in flight on the session: frames that end together (the
// answers of one group commit, the next calls of the workers one read of
// answers woke) are then about to be added, and the writer yields once
// before each write so that they join it (a loopback write costs
// microseconds, a yield a fraction of one). Alone, it writes at once: a
// yield would queue it behind whatever else runs. It returns the error of
// the write that failed, this one's or an earlier one's.
func (w *FrameWriter) Write(add func([]byte) []byte, busy func() bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.out = add(w.out)
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
		w.mu.Unlock()
		err := w.write(out)
		w.mu.Lock()
		if cap(out) <= 64<<10 {
			w.spare = out[:0]
		}
		if err != nil {
			w.err = err
		}
	}
	w.out = w.out[:0]
	w.writing = false
	return w.err
}
