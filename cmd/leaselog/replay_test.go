package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/clocktest"
	"github.com/leaselog/leaselog/lease"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := (&Main{Stdout: &out, Stderr: &errOut}).Run(context.Background(), args)
	return out.String() + errOut.String(), err
}

func TestReplayCommand(t *testing.T) {
	dir := t.TempDir()
	log, err := eventlog.Open(dir, eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := lease.Open(log, lease.Options{Config: lease.DefaultConfig(), Clock: clocktest.New(clocktest.Epoch)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := svc.Submit(ctx, "j1", eventlog.KindRun, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Acquire(ctx, "w1", 1); err != nil {
		t.Fatal(err)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}

	out, err := run(t, "replay", "--data", dir, "--verify")
	if err != nil || !strings.Contains(out, "job j1 run acquired") || !strings.Contains(out, "verified: 3 events, 1 snapshots") {
		t.Fatalf("replay --verify: %v\n%s", err, out)
	}
	out, err = run(t, "replay", "--data", dir)
	if err != nil || !strings.Contains(out, "rebuilt: snapshot at seq 3, then 0 events") {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	empty := t.TempDir()
	out, err = run(t, "replay", "--data", empty)
	if err != nil || !strings.Contains(out, "the log is empty") {
		t.Fatalf("replay of no store: %v\n%s", err, out)
	}
	if _, err := run(t, "replay", "--data", empty, "--verify"); err == nil || !strings.Contains(err.Error(), "nothing to verify") {
		t.Fatalf("replay --verify of no store: %v", err)
	}
	// A folder that is not there is a mistake, not an empty log; and
	// looking creates nothing.
	missing := filepath.Join(t.TempDir(), "none")
	for _, args := range [][]string{{"replay", "--data", missing}, {"replay", "--data", missing, "--verify"}} {
		if _, err := run(t, args...); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%v: %v, want a not-exist error", args, err)
		}
		if _, err := os.Lstat(missing); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%v created %s: %v", args, missing, err)
		}
	}
	if _, err := run(t, "replay"); err == nil || !strings.Contains(err.Error(), "--data") {
		t.Fatalf("replay without --data: %v", err)
	}
}

// TestDemo runs `leaselog demo` in-process: every act it narrates must
// happen, or it fails.
func TestDemo(t *testing.T) {
	out, err := run(t, "demo")
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{
		"lease.expired        job=eval-1 lease=3 worker=w1",
		"Refused: HTTP 409 stale_lease",
		"the first report's answer; no new event",
		"agent-1 is reported (succeeded), attempts 1, same lease",
		"lease.stale_report   job=eval-1 lease=3 worker=w1 outcome=succeeded ref=refs/leaselog/eval-1/3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}
