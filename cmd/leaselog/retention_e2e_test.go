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
	waitFor(t, "run directory "+run+" removed with --retention 1ms", func() bool {
		_, err := os.Stat(run)
		return errors.Is(err, fs.ErrNotExist)
	})
	// The worker logs the removal once it is done: the line may follow.
	waitFor(t, "the removal's log line", func() bool {
		return strings.Contains(again.output(), `"message":"local: retention: run directory removed"`)
	})
}
