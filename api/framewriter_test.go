package api

import (
	"context"
	"errors"
	"strings"
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
	}, 0)
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

// TestFrameWriterLargeWriteKeepsFrames: after a write too large to keep as
// the spare buffer (over 64 KiB, the answers of thousands of workers at
// once), frames added while later writes are in progress do not land in the
// buffer being written. (The buffer the writer appended to became the one
// it wrote from, and a session's answers were cut into one another:
// `leaselog bench --mode density` at 5,000 workers read a frame header
// from the middle of a body.)
func TestFrameWriterLargeWriteKeepsFrames(t *testing.T) {
	var wire []byte
	entered, release := make(chan struct{}, 4), make(chan struct{}, 4)
	w := NewFrameWriter(func(b []byte) error {
		entered <- struct{}{}
		<-release // frames are added meanwhile
		wire = append(wire, b...)
		return nil
	}, 0)
	frame := func(s string) func([]byte) []byte { return func(dst []byte) []byte { return append(dst, s...) } }
	alone := func() bool { return false }
	release <- struct{}{}
	if err := w.Write(frame("small;"), alone); err != nil { // its buffer becomes the spare
		t.Fatal(err)
	}
	<-entered
	big := strings.Repeat("x", 70<<10) + ";"
	done := make(chan error)
	go func() { done <- w.Write(frame(big), alone) }()
	<-entered // writing the large frame
	if err := w.Write(frame("second;"), alone); err != nil {
		t.Fatal(err)
	}
	release <- struct{}{}
	<-entered // writing "second;"
	if err := w.Write(frame("THIRD!;"), alone); err != nil {
		t.Fatal(err)
	}
	release <- struct{}{}
	<-entered // writing "THIRD!;"
	release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := string(wire), "small;"+big+"second;THIRD!;"; got != want {
		t.Fatalf("on the wire after the large frame: %q, want %q", got[len("small;")+len(big):], want[len("small;")+len(big):])
	}
}

// TestFrameWriterBacklog: Wait lets its caller pass while the frames not yet
// written — the write in progress included — are within the bound, holds it
// while they are over it until a write takes them back within, and returns
// a failed write's error. Without a bound it never waits.
func TestFrameWriterBacklog(t *testing.T) {
	entered := make(chan string, 4)
	release := make(chan error)
	w := NewFrameWriter(func(b []byte) error {
		entered <- string(b)
		return <-release
	}, 10)
	frame := func(s string) func([]byte) []byte { return func(dst []byte) []byte { return append(dst, s...) } }
	alone := func() bool { return false }
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	wrote := make(chan error, 1)
	go func() { wrote <- w.Write(frame("aaaa"), alone) }()
	<-entered // 4 bytes being written: within the bound
	if err := w.Wait(cancelled); err != nil {
		t.Fatalf("Wait within the bound: %v, want nil at once", err)
	}
	if err := w.Write(frame("bbbbbbbb"), alone); err != nil { // 4 + 8 waiting: over
		t.Fatal(err)
	}
	if err := w.Wait(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait over the bound: %v, want it to wait (until its context ends)", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- w.Wait(context.Background()) }()
	release <- nil // "aaaa" taken: "bbbbbbbb", 8 bytes, is within the bound
	if got := <-entered; got != "bbbbbbbb" {
		t.Fatalf("second write %q", got)
	}
	if err := <-waited; err != nil {
		t.Fatalf("Wait once the backlog is back within the bound: %v", err)
	}

	// Over the bound again, and the write fails: the waiter hears why.
	if err := w.Write(frame("ccccc"), alone); err != nil { // 8 + 5
		t.Fatal(err)
	}
	go func() { waited <- w.Wait(context.Background()) }()
	fail := errors.New("cut")
	release <- fail
	if err := <-waited; !errors.Is(err, fail) {
		t.Fatalf("Wait when the write failed: %v, want %v", err, fail)
	}
	if err := <-wrote; !errors.Is(err, fail) {
		t.Fatalf("the writer's Write: %v, want %v", err, fail)
	}
	if err := w.Err(); !errors.Is(err, fail) {
		t.Fatalf("Err: %v, want %v", err, fail)
	}

	// No bound: Wait never waits, whatever waits to be written.
	unbounded := NewFrameWriter(func(b []byte) error { entered <- string(b); return <-release }, 0)
	go func() { wrote <- unbounded.Write(frame(strings.Repeat("x", 1000)), alone) }()
	<-entered
	if err := unbounded.Write(frame(strings.Repeat("y", 1000)), alone); err != nil {
		t.Fatal(err)
	}
	if err := unbounded.Wait(cancelled); err != nil {
		t.Fatalf("Wait without a bound: %v, want nil at once", err)
	}
	release <- nil
	<-entered
	release <- nil
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}
