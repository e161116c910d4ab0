package main

// Start-up under trouble, with real processes: a full disk, and SIGTERM at
// every stage.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/synth"
)

// startBound is how long a start-up may take to fail or to stop on a
// signal: startStopWait or storeErrorGrace, and a margin for a loaded machine.
const startBound = 10 * time.Second

// TestServeFullDisk: restarted on a full disk, serve fails within seconds
// with a message and a non-zero exit — Pebble would retry flushing its log
// for ever — whether the disk has no bytes left (refused before opening) or
// no inodes (Pebble's flush fails in the background during the open);
// given room again, it starts with its jobs.
func TestServeFullDisk(t *testing.T) {
	for _, tc := range []struct {
		name, options string
		fill          func(t *testing.T, dir string)
	}{
		{"no bytes left", "size=8m", func(t *testing.T, dir string) { fill(t, filepath.Join(dir, "filler")) }},
		{"no inodes left", "size=64m,nr_inodes=256", fillInodes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mnt := t.TempDir()
			if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, tc.options); err != nil {
				t.Skipf("mounting a tmpfs is not permitted here (%v): a full disk cannot be made", err)
			}
			t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
			data := filepath.Join(mnt, "data")
			env := childEnv()
			args := []string{"serve", "--data", data, "--listen", "127.0.0.1:0", "--local-capacity", "0"}

			// The first life is killed: its last events are in the
			// write-ahead log only, which the next open must flush.
			p := startProcIn(t, "serve", mnt, env, args...)
			c, _ := api.NewClient(listening(t, p), "")
			submit(t, c, "kept", "run", "true")
			p.signal(syscall.SIGKILL)
			p.wait()

			filled := filepath.Join(mnt, "filled")
			if err := os.Mkdir(filled, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.fill(t, filled)
			ctx, cancel := context.WithTimeout(context.Background(), 3*startBound)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, args...)
			cmd.Env = env
			start := time.Now()
			out, err := cmd.CombinedOutput()
			took := time.Since(start)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() <= 0 || took > startBound || !strings.Contains(string(out), "no space left on device") {
				t.Fatalf("on a full disk: %v after %v, want a non-zero exit within %v saying so\n%s", err, took, startBound, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			t.Logf("exit %d after %v: %s", ee.ExitCode(), took.Round(time.Millisecond), lines[len(lines)-1])

			if err := os.RemoveAll(filled); err != nil {
				t.Fatal(err)
			}
			p = startProcIn(t, "serve again", mnt, env, args...)
			c, _ = api.NewClient(listening(t, p), "")
			if j := job(t, c, "kept"); j.ID != "kept" {
				t.Fatalf("after the full disk: %+v", j)
			}
		})
	}
}

// fillInodes creates empty files in dir until the disk has no inode left.
func fillInodes(t *testing.T, dir string) {
	t.Helper()
	for i := 0; ; i++ {
		f, err := os.Create(filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
		f.Close()
	}
}

// fill writes path until the disk is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// startStages are the lines serve logs as its start-up goes on, in order.
var startStages = []string{"opening the store", "rebuilding the lease table", "lease table rebuilt", "listening"}

// nextStage is the stage after stage, "" after the last.
func nextStage(stage string) string {
	i := slices.Index(startStages, stage)
	if i < 0 || i+1 == len(startStages) {
		return ""
	}
	return startStages[i+1]
}

// TestServeSIGTERMDuringStartup: SIGTERM stops serve at every stage of its
// start-up — opening Pebble (which flushes a long write-ahead log),
// rebuilding the table from a long log, once it is rebuilt, once it listens
// — within seconds, with exit 0; and the store opens and verifies after
// each. A stage that never returns (Pebble reading a write-ahead log that is
// a FIFO nobody writes, as a stuck disk would) cannot be interrupted: serve
// exits under it.
func TestServeSIGTERMDuringStartup(t *testing.T) {
	// A log of 100,000 events and no snapshot: every start replays it all.
	t.Setenv("LEASELOG_BENCH_DIR", t.TempDir())
	fixture, err := synth.Fixture(synth.Default, 100_000, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		stage string
		stuck bool
	}{
		{stage: "opening the store"},
		{stage: "rebuilding the lease table"},
		{stage: "lease table rebuilt"},
		{stage: "listening"},
		{stage: "opening the store", stuck: true},
	} {
		name := tc.stage
		if tc.stuck {
			name += ", stuck"
		}
		t.Run(name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			copyDir(t, fixture, data)
			if tc.stuck {
				wals, _ := filepath.Glob(filepath.Join(data, "*.log"))
				if len(wals) == 0 {
					t.Fatal("the fixture has no write-ahead log")
				}
				if err := os.Remove(wals[0]); err != nil {
					t.Fatal(err)
				}
				if err := syscall.Mkfifo(wals[0], 0o644); err != nil {
					t.Fatal(err)
				}
			}
			p := startProcIn(t, "serve", t.TempDir(), childEnv(), "serve", "--data", data, "--listen", "127.0.0.1:0", "--local-capacity", "0")
			waitLine(t, p, tc.stage)
			p.signal(syscall.SIGTERM)
			sent := time.Now()
			select {
			case <-p.done:
			case <-time.After(startBound):
				t.Fatalf("serve still running %v after SIGTERM", startBound)
			}
			if code := p.cmd.ProcessState.ExitCode(); code != 0 {
				t.Fatalf("exit %d after SIGTERM", code)
			}
			// However far the start-up got, it stopped the way its stage
			// allows: gracefully once listening, else at the next stage, or
			// by exiting under a stage that did not end within
			// startStopWait — always the stuck one, and on a loaded machine
			// a slow one too (serve cannot tell them apart): then the next
			// stage was never reached.
			out := p.output()
			graceful, atStage, abandoned := hasLine(out, "stopped"), hasLine(out, "stopped during start-up"),
				strings.Contains(out, "did not reach a stage where it can stop")
			if hasLine(out, "listening") != graceful || !graceful && !atStage && !abandoned || tc.stuck && !abandoned {
				t.Fatalf("stopped gracefully %v, at a stage %v, by exiting %v", graceful, atStage, abandoned)
			}
			if next := nextStage(tc.stage); abandoned && (next == "" || hasLine(out, next)) {
				t.Fatalf("exited under a stage that ended (%q logged) instead of stopping at it", next)
			}
			t.Logf("exit 0 after %v; gracefully %v, at a stage %v, by exiting %v", time.Since(sent).Round(time.Millisecond), graceful, atStage, abandoned)
			if tc.stuck {
				return // its log is a FIFO
			}
			if out, err := run(t, "replay", "--data", data, "--verify"); err != nil {
				t.Fatalf("the store after SIGTERM: %v\n%s", err, out)
			}
		})
	}
}

// waitLine waits for serve to log msg.
func waitLine(t *testing.T, p *proc, msg string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !hasLine(p.output(), msg) {
		select {
		case <-p.done:
			t.Fatalf("%s exited before %q:\n%s", p.name, msg, p.output())
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q:\n%s", p.name, msg, p.output())
		}
	}
}

func hasLine(out, msg string) bool {
	for _, line := range strings.Split(out, "\n") {
		var l struct{ Message string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Message == msg {
			return true
		}
	}
	return false
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "LOCK" || !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(to, e.Name()))
		if err == nil {
			_, err = io.Copy(out, in)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
		}
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}
