package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/worker/local/supervise"
)

// The tests of a job that tampers with its run directory, which it may
// write in: what leaselog reads there must neither hang on a named pipe nor
// show a file outside through a link.

// secret is a file of the worker's user outside every run directory (its
// configuration, with its tokens): no read of a run may show it.
const secret = "s3cret-token"

func writeSecret(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leaselog.toml")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A run directory whose stream, .leaselog folder or very self the job
// replaced: ReadOutput answers at once (the context's deadline is the
// failure detector, not a sleep) with a *supervise.KindError naming what it
// found, and never the content of what a link points at.
func TestReadOutputRefusesWhatTheJobPlanted(t *testing.T) {
	t.Parallel()
	outside := writeSecret(t)
	// elsewhere is a .leaselog folder outside the root, with a stdout.
	elsewhere := t.TempDir()
	if err := os.WriteFile(filepath.Join(elsewhere, "stdout"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		stream string
		plant  func(run string) error // run: the run directory, its .leaselog made
		want   string
	}{
		{"stdout a named pipe", "stdout", func(run string) error {
			return syscall.Mkfifo(filepath.Join(run, stateDir, "stdout"), 0o600)
		}, "j-1/.leaselog/stdout is a named pipe, not a regular file"},
		{"stderr a named pipe", "stderr", func(run string) error {
			return syscall.Mkfifo(filepath.Join(run, stateDir, "stderr"), 0o600)
		}, "j-1/.leaselog/stderr is a named pipe, not a regular file"},
		{"stdout a link", "stdout", func(run string) error {
			return os.Symlink(outside, filepath.Join(run, stateDir, "stdout"))
		}, "j-1/.leaselog/stdout is a symbolic link, not a regular file"},
		{"stdout a hard link", "stdout", func(run string) error {
			return os.Link(outside, filepath.Join(run, stateDir, "stdout"))
		}, "j-1/.leaselog/stdout is a regular file with 2 links, not a file of its own"},
		{"stdout a directory", "stdout", func(run string) error {
			return os.Mkdir(filepath.Join(run, stateDir, "stdout"), 0o755)
		}, "j-1/.leaselog/stdout is a directory, not a regular file"},
		{".leaselog a link", "stdout", func(run string) error {
			if err := os.Remove(filepath.Join(run, stateDir)); err != nil {
				return err
			}
			return os.Symlink(elsewhere, filepath.Join(run, stateDir))
		}, "j-1/.leaselog is a symbolic link, not a directory"},
		{"the run directory a link", "stdout", func(run string) error {
			other := t.TempDir()
			if err := os.Symlink(elsewhere, filepath.Join(other, stateDir)); err != nil {
				return err
			}
			if err := os.RemoveAll(run); err != nil {
				return err
			}
			return os.Symlink(other, run)
		}, "j-1 is a symbolic link, not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			run := filepath.Join(root, "j-1")
			if err := os.MkdirAll(filepath.Join(run, stateDir), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := tc.plant(run); err != nil {
				t.Fatal(err)
			}
			dir, _, err := FindRun(root, "j", 1)
			if err != nil {
				t.Fatalf("FindRun: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitBound)
			defer cancel()
			b, err := ReadOutput(ctx, dir, tc.stream, 0, 1<<10)
			var kind *supervise.KindError
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				t.Fatalf("ReadOutput still waiting after %v", waitBound)
			case !errors.As(err, &kind) || err.Error() != tc.want:
				t.Fatalf("ReadOutput: %q, %v; want a *supervise.KindError saying %q", b, err, tc.want)
			case strings.Contains(string(b), secret):
				t.Fatalf("ReadOutput showed the file outside: %q", b)
			}
			if RunEnded(dir) {
				t.Fatal("a run with no exit status and no pid file reads as ended")
			}
		})
	}
}

// A job that made its stdout a named pipe and ended: its output is refused
// at once, and the run reads as ended.
func TestReadOutputOfAJobThatMadeItsStdoutAPipe(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Second)
	g := grant(t, "piped", 1, api.Spec{Run: "echo before; rm .leaselog/stdout && mkfifo .leaselog/stdout"})
	wantOutcome(t, await(t, start(t, e, g)), "succeeded", "")
	dir, _, err := FindRun(e.Dir(), "piped", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !RunEnded(dir) {
		t.Fatal("an ended job's run reads as not ended")
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	var kind *supervise.KindError
	if _, err := ReadOutput(ctx, dir, "stdout", 0, 1<<10); !errors.As(err, &kind) || kind.Is != "a named pipe" {
		t.Fatalf("ReadOutput: %v, want a *supervise.KindError for a named pipe", err)
	}
}

// The files the worker reads when a job ends or after a restart (exit,
// pid) are read through no link: a job that made them links to a small
// file of its user (a token) does not get it into a report's reason or the
// worker's log.
func TestStateFilesThroughALinkShowNothing(t *testing.T) {
	t.Parallel()
	outside := writeSecret(t)
	e, _ := newExecutor(t, t.TempDir(), time.Second)
	// A directory with something in it where the supervisor writes exit.tmp
	// stops it writing its exit status: the link stays.
	g := grant(t, "sly", 1, api.Spec{Run: "mkdir -p .leaselog/exit.tmp/keep && ln -s " + q(outside) + " .leaselog/exit"})
	out := await(t, start(t, e, g))
	if strings.Contains(out.Reason, secret) {
		t.Fatalf("the reason shows the file outside: %q", out.Reason)
	}
	wantOutcome(t, out, "failed", "sly-1/.leaselog/exit is a symbolic link, not a regular file")

	dir := runDirOf(e, g)
	pidFile := filepath.Join(dir, stateDir, pidFile)
	if err := os.Remove(pidFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, pidFile); err != nil {
		t.Fatal(err)
	}
	var kind *supervise.KindError
	if _, err := readPid(dir); !errors.As(err, &kind) || strings.Contains(err.Error(), secret) {
		t.Fatalf("readPid through a link: %v, want a *supervise.KindError", err)
	}
}

// A job that leaves named pipes where the worker writes its stop and fence
// files through temporary names: Fence and Stop return at once (a write
// that waited for a reader would hold the run's lock, and the worker with
// it), the deadline is moved and the kill happens.
func TestFenceAndStopOverPipesTheJobLeft(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Second)
	ready := fifo(t, "ready")
	g := grant(t, "pipes", 1, api.Spec{Run: "mkfifo .leaselog/fence.tmp .leaselog/stop.tmp && echo up > " + q(ready) + "; sleep 60"})
	r := start(t, e, g)
	readFIFO(t, ready)
	state := filepath.Join(runDirOf(e, g), stateDir)

	returns := func(what, pipe string, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() {
			defer close(done)
			f()
		}()
		select {
		case <-done:
		case <-time.After(waitBound):
			// Let the write the test failed on go, so that it does not
			// outlive the test holding the run's lock.
			if p, err := os.OpenFile(filepath.Join(state, pipe), os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
				defer p.Close()
				<-done
			}
			t.Fatalf("%s still waiting after %v", what, waitBound)
		}
	}
	at := fenceClock.Now().Add(time.Hour).Truncate(time.Second)
	returns("Fence", "fence.tmp", func() { r.Fence(at) })
	if _, got, err := supervise.ReadFence(state); err != nil || !got.Equal(at) {
		t.Fatalf("fence after Fence(%v): %v, %v", at, got, err)
	}
	returns("Stop", "stop.tmp", func() { r.Stop(true) })
	wantOutcome(t, await(t, r), "killed", "killed by the worker")
}

// bounded returns when its context is done, whatever the read does, and
// runs no more reads at once than it has slots: a read stuck in the kernel
// (a hung filesystem) holds its own goroutine and slot, not its caller.
func TestBoundedReadsReturnAtTheDeadline(t *testing.T) {
	t.Parallel()
	slots := make(chan struct{}, 2)
	stuck := make(chan struct{}) // closed: the stuck reads return
	started := make(chan struct{}, 2)
	stuckRead := func() ([]byte, error) {
		started <- struct{}{}
		<-stuck
		return []byte("late"), nil
	}
	for i := range cap(slots) {
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		go func() {
			_, err := bounded(ctx, slots, stuckRead)
			res <- err
		}()
		<-started
		cancel()
		select {
		case err := <-res:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("read %d: %v, want context.Canceled", i, err)
			}
		case <-time.After(waitBound):
			t.Fatalf("read %d: still held after its context was cancelled", i)
		}
	}
	// Both slots are held by reads still stuck: a third waits for one, and
	// gives up with its context without reading.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := bounded(ctx, slots, func() ([]byte, error) {
		t.Error("a read ran with every slot held")
		return nil, nil
	}); !errors.Is(err, context.Canceled) {
		t.Fatalf("with every slot held: %v, want context.Canceled", err)
	}
	// Once the stuck reads return, their slots are free again.
	close(stuck)
	ctx, cancel = context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if b, err := bounded(ctx, slots, func() ([]byte, error) { return []byte("ok"), nil }); err != nil || string(b) != "ok" {
		t.Fatalf("after the stuck reads returned: %q, %v", b, err)
	}
}
