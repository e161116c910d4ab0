package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leaselog worker keeps a run directory for --retention after its job
// ended (a week by default), then removes it; a worker started again looks
// at once.
func TestE2EWorkerRetention(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	ev := d.follow(t, 0)
	wdir := filepath.Join(dir, "w1")
	w := startWorker(t, d.url, "w1", wdir)
	submit(t, d.c, "old", "run", "echo done")
	run := filepath.Join(wdir, fmt.Sprintf("old-%d", ev.next("lease.reported", "old").Lease))
	w.signal(syscall.SIGTERM)
	if code := w.wait(); code != 0 {
		t.Fatalf("worker exit %d", code)
	}
	if _, err := os.Stat(filepath.Join(run, ".leaselog", "stdout")); err != nil {
		t.Fatalf("run directory gone under the default retention: %v", err)
	}

	again := startProc(t, "worker w1 again", "worker", "--server", d.url, "--id", "w1", "--workdir", wdir,
		"--capacity", "1", "--log-format", "json", "--retention", "1ms")
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := os.Stat(run)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run directory %s still there (%v) with --retention 1ms", run, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a bound
	}
	if !strings.Contains(again.output(), `"message":"local: retention: run directory removed"`) {
		t.Errorf("no log line for the removal:\n%s", again.output())
	}
}
