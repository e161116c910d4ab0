package inprocess_test

import (
	"context"
	"testing"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/inprocess"
	"github.com/leaselog/leaselog/internal/leasetest"
)

// TestInProcessHeldSeconds: the in-process adapter says, as the HTTP server
// does, how long the daemon held an acquire before granting: nothing for a
// job that was waiting, and the wait for one that came during the long poll.
func TestInProcessHeldSeconds(t *testing.T) {
	_, svc := leasetest.Open(t) // on the host's clock: the hold is measured in real time
	d := inprocess.New(svc)
	ctx := context.Background()

	if _, _, err := svc.Submit(ctx, "waiting", event.KindRun, []byte(`{"run":"true"}`)); err != nil {
		t.Fatal(err)
	}
	gs, err := d.Acquire(ctx, "w1", 1, 10*time.Second)
	if err != nil || len(gs) != 1 {
		t.Fatalf("acquire: %v, %v", gs, err)
	}
	if gs[0].HeldSeconds != 0 {
		t.Fatalf("a job that was waiting: held %vs, want 0", gs[0].HeldSeconds)
	}

	// The hold is what is measured here, not a synchronisation: the job is
	// submitted hold after the acquire was sent, so the daemon held it at
	// least about that long (the acquire parks within hold/2 of being sent).
	const hold = time.Second // hold/2 of slack for the goroutine to park, on a loaded machine
	type answer struct {
		held, took time.Duration
		err        error
	}
	done := make(chan answer, 1)
	sent := time.Now()
	go func() {
		gs, err := d.Acquire(ctx, "w1", 1, 10*time.Second)
		a := answer{took: time.Since(sent), err: err}
		if err == nil && len(gs) == 1 {
			a.held = time.Duration(gs[0].HeldSeconds * float64(time.Second))
		}
		done <- a
	}()
	time.Sleep(hold)
	if _, _, err := svc.Submit(ctx, "later", event.KindRun, []byte(`{"run":"true"}`)); err != nil {
		t.Fatal(err)
	}
	var a answer
	select {
	case a = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the held acquire")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.held < hold/2 || a.held > a.took {
		t.Fatalf("held %v, want at least %v and at most the %v the call took", a.held, hold/2, a.took)
	}
}
