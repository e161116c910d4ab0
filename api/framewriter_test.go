package api

import (
	"errors"
	"testing"
)

// TestFrameWriter: a frame added while another is being written goes out
// with the next write, the two frames after it in one; a failed write is
// returned to its writer and to every later one, which writes nothing.
func TestFrameWriter(t *testing.T) {
	var writes []string
	entered, release := make(chan struct{}), make(chan struct{})
	fail := errors.New("cut")
	var w *FrameWriter
	w = NewFrameWriter(func(b []byte) error {
		writes = append(writes, string(b))
		switch len(writes) {
		case 1:
			close(entered)
			<-release // frames are added meanwhile
		case 3:
			return fail
		}
		return nil
	})
	frame := func(s string) func([]byte) []byte { return func(dst []byte) []byte { return append(dst, s...) } }
	alone := func() bool { return false }
	done := make(chan error)
	go func() { done <- w.Write(frame("a"), alone) }()
	<-entered
	for _, f := range []string{"b", "c"} {
		if err := w.Write(frame(f), alone); err != nil { // added, left to the writer
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := w.Write(frame("d"), alone); !errors.Is(err, fail) {
		t.Fatalf("the failed write: %v, want %v", err, fail)
	}
	if err := w.Write(frame("e"), alone); !errors.Is(err, fail) {
		t.Fatalf("a write after the failure: %v, want %v", err, fail)
	}
	if want := []string{"a", "bc", "d"}; len(writes) != 3 || writes[0] != want[0] || writes[1] != want[1] || writes[2] != want[2] {
		t.Fatalf("writes %q, want %q", writes, want)
	}
}
