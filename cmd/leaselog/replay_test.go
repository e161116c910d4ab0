package main

import (
	"bytes"
	"context"
	be "encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/internal/testkit/synth"
	"github.com/leaselog/leaselog/timing"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := (&Main{Stdout: &out, Stderr: &errOut}).Run(context.Background(), args)
	return out.String() + errOut.String(), err
}

func TestReplayCommand(t *testing.T) {
	dir := t.TempDir()
	log, svc := leasetest.Open(t, leasetest.Disk(dir), leasetest.Config(timing.Default()), leasetest.Clock(clocktest.New(clocktest.Epoch)))
	ctx := context.Background()
	if _, _, err := svc.Submit(ctx, "j1", event.KindRun, nil); err != nil {
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

// TestDemo runs `leaselog demo` in-process, on the daemon serve starts:
// every act it narrates must happen, or it fails. Its whole output is
// held to a golden file in package demo.
func TestDemo(t *testing.T) {
	out, err := run(t, "demo")
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{
		"lease.expired       job=eval-1 lease=3 worker=w1",
		`HTTP 409 {"error":{"code":"stale_lease"`,
		`{"accepted":true,"job":"eval-1","lease":8,"seq":12}`,
		"agent-1 is reported (succeeded), attempts 1, on the same lease 17",
		"lease.stale_report  job=eval-1 lease=3 worker=w1 outcome=succeeded ref=refs/leaselog/eval-1/3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}

// TestReplayVerifyCorrupt: on a corrupt store, replay --verify exits 70 and
// says what is corrupt: a record's sequence number, or a damaged file and
// its key range — in a line, not a stack trace.
func TestReplayVerifyCorrupt(t *testing.T) {
	t.Setenv("LEASELOG_BENCH_DIR", t.TempDir())
	fixture, err := synth.Fixture(synth.Default, 20_000, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string) string // returns what the message must name
	}{
		{"a record", func(t *testing.T, dir string) string {
			db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: quietPebble{}})
			if err != nil {
				t.Fatal(err)
			}
			key := be.BigEndian.AppendUint64([]byte{'e'}, 1234)
			if err := db.Set(key, []byte("not an event"), pebble.Sync); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			return "seq 1234"
		}},
		{"a table file", func(t *testing.T, dir string) string {
			// Opening the store flushes its write-ahead log into tables.
			log, err := eventlog.Open(dir, eventlog.Options{Logger: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			if err := log.Close(); err != nil {
				t.Fatal(err)
			}
			ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
			var biggest string
			var size int64
			for _, f := range ssts {
				if fi, err := os.Stat(f); err == nil && fi.Size() > size {
					biggest, size = f, fi.Size()
				}
			}
			if biggest == "" {
				t.Fatal("no table file")
			}
			f, err := os.OpenFile(biggest, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(bytes.Repeat([]byte{0x5a}, 64), size/2); err != nil {
				t.Fatal(err)
			}
			return filepath.Base(biggest)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			copyDir(t, fixture, dir)
			want := tc.damage(t, dir)
			cmd := exec.Command(binary, "replay", "--data", dir, "--verify")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			_ = cmd.Run()
			msg := strings.TrimSpace(stderr.String())
			if code := cmd.ProcessState.ExitCode(); code != eventlog.ExitFatal || !strings.Contains(msg, want) || !strings.Contains(msg, "corrupt") || strings.Count(msg, "\n") > 0 {
				t.Fatalf("exit %d, want %d, and one line naming %q:\n%s", code, eventlog.ExitFatal, want, msg)
			}
		})
	}
}

// quietPebble keeps Pebble's messages out of the test's output.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)              {}
func (quietPebble) Errorf(string, ...any)             {}
func (quietPebble) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
