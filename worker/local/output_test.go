package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
)

func TestLeaseOfDir(t *testing.T) {
	for _, tc := range []struct {
		name, job string
		lease     uint64
		ok        bool
	}{
		{"a-15", "a", 15, true},
		{"a-1-5", "a", 0, false}, // job a-1's
		{"a-1-5", "a-1", 5, true},
		{"a-1-5", "", 5, true},
		{"a-", "a", 0, false},
		{"a-07", "a", 0, false},
		{"a-x", "", 0, false},
		{"notes", "", 0, false},
	} {
		l, ok := leaseOfDir(tc.name, tc.job)
		if l != tc.lease || ok != tc.ok {
			t.Errorf("leaseOfDir(%q, %q) = %d, %v; want %d, %v", tc.name, tc.job, l, ok, tc.lease, tc.ok)
		}
	}
}

// A running job's output reads as it grows, from any offset, each stream
// on its own; the run is not ended until its command is.
func TestReadOutputOfARunningJob(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Second)
	ready, release := fifo(t, "ready"), fifo(t, "release")
	g := grant(t, "out", 3, api.Spec{Run: "echo one; echo oops >&2; echo up > " + q(ready) + "; read x < " + q(release) + "; echo two"})
	r := start(t, e, g)
	readFIFO(t, ready)

	dir, lease, err := FindRun(e.Dir(), "out", 0)
	if err != nil || lease != 3 || dir != runDirOf(e, g) {
		t.Fatalf("FindRun = %s, %d, %v", dir, lease, err)
	}
	read := func(stream string, offset int64, max int) string {
		t.Helper()
		b, err := ReadOutput(context.Background(), dir, stream, offset, max)
		if err != nil {
			t.Fatalf("ReadOutput(%s, %d): %v", stream, offset, err)
		}
		return string(b)
	}
	if got := read("stdout", 0, 1<<10); got != "one\n" {
		t.Fatalf("stdout so far %q", got)
	}
	if got := read("stderr", 0, 1<<10); got != "oops\n" {
		t.Fatalf("stderr %q", got)
	}
	if RunEnded(dir) {
		t.Fatal("a running job's run reads as ended")
	}
	writeFIFO(t, release, "go\n")
	await(t, r)
	if !RunEnded(dir) {
		t.Fatal("an ended job's run reads as not ended")
	}
	for _, tc := range []struct {
		offset int64
		max    int
		want   string
	}{{0, 1 << 10, "one\ntwo\n"}, {4, 1 << 10, "two\n"}, {0, 2, "on"}, {8, 10, ""}, {100, 10, ""}} {
		if got := read("stdout", tc.offset, tc.max); got != tc.want {
			t.Errorf("stdout from %d, at most %d: %q, want %q", tc.offset, tc.max, got, tc.want)
		}
	}
}

func TestFindRunAndReadOutputRefuse(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, d := range []string{"j-2/.leaselog", "j-10/.leaselog", "j-x-3/.leaselog"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if dir, lease, err := FindRun(root, "j", 0); err != nil || lease != 10 || filepath.Base(dir) != "j-10" {
		t.Fatalf("latest of j: %s, %d, %v", dir, lease, err)
	}
	if _, _, err := FindRun(root, "j", 3); !errors.Is(err, ErrNoRun) {
		t.Fatalf("lease 3 of j: %v", err)
	}
	if _, _, err := FindRun(root, "k", 0); !errors.Is(err, ErrNoRun) {
		t.Fatalf("job k: %v", err)
	}
	if _, _, err := FindRun(root, "../etc", 0); err == nil {
		t.Fatal("a job id with a slash accepted")
	}
	dir := filepath.Join(root, "j-2")
	if b, err := ReadOutput(context.Background(), dir, "stdout", 0, 10); err != nil || len(b) != 0 {
		t.Fatalf("no output yet: %q, %v", b, err)
	}
	for _, tc := range []struct {
		dir, stream string
		offset      int64
	}{{dir, "spec.json", 0}, {dir, "stdout", -1}, {filepath.Join(root, "gone-1"), "stdout", 0}} {
		if _, err := ReadOutput(context.Background(), tc.dir, tc.stream, tc.offset, 10); err == nil {
			t.Errorf("ReadOutput(%s, %s, %d) accepted", tc.dir, tc.stream, tc.offset)
		}
	}
}
