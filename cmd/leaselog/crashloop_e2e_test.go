package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestE2ECrashLoopExpiresASilentWorker: the real daemon is SIGKILLed 0.6 s
// into each of its lives (toleration 1.5 s) and started again at once on the
// same data, while the worker that took an evaluation says nothing more.
// Each start counts as its absence only the time it was down — the sweeper's
// alive mark, in the OS when the process died, says when it was last alive —
// so the daemon's up-time counts against the silent worker: its lease
// expires, and the evaluation is queued again, within a few lives; never
// before the daemons' lives since the grant add up to toleration.
func TestE2ECrashLoopExpiresASilentWorker(t *testing.T) {
	const (
		life     = 600 * time.Millisecond
		maxLives = 8 // 4.8 s of lives: toleration three times over, with room for a loaded host
	)
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	submit(t, d.c, "e1", "evaluation", "true")
	gs, err := d.c.Acquire(context.Background(), "w1", 1, 0)
	if err != nil || len(gs) != 1 {
		t.Fatalf("acquire: %v, %v", gs, err)
	}
	from := time.Now()      // w1 says nothing from here on
	var lived time.Duration // the daemons' lives since the grant, each counted from its process's start: at least their up-time
	for lives := 1; ; lives++ {
		time.Sleep(life) // not synchronisation: the life under test
		d.signal(syscall.SIGKILL)
		d.wait()
		lived += time.Since(from)
		from = time.Now()
		d = startServe(t, dir, 0)
		types := history(t, d.c, "e1")
		i := slices.Index(types, "lease.expired")
		if i < 0 {
			if lives == maxLives {
				t.Fatalf("lease %d still live after %d lives of %v (%v in all; toleration %v): %v", gs[0].Lease, lives, life, lived, toleration, types)
			}
			continue
		}
		if lived <= toleration {
			t.Fatalf("lease %d expired within %v of the daemons' lives since the grant: not past toleration (%v)", gs[0].Lease, lived, toleration)
		}
		if i+1 >= len(types) || types[i+1] != "lease.queued" {
			t.Fatalf("e1's history after the expiry: %v, want lease.queued next", types)
		}
		t.Logf("expired in life %d, after at most %v of the daemons' lives since the grant", lives, lived)
		break
	}
	d.signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM", code)
	}
	if out, err := exec.Command(binary, "replay", "--data", filepath.Join(dir, "data"), "--verify").CombinedOutput(); err != nil {
		t.Fatalf("replay --verify after the crash loop: %v\n%s", err, out)
	}
}
