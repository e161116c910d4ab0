package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
)

// logsRun is one `leaselog logs` process, its streams apart.
type logsRun struct {
	cmd            *exec.Cmd
	stdout, stderr testutil.SyncBuffer
	done           chan error
}

func startLogs(t *testing.T, args ...string) *logsRun {
	t.Helper()
	r := &logsRun{cmd: exec.Command(binary, append([]string{"logs"}, args...)...), done: make(chan error, 1)}
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() { _ = r.cmd.Process.Kill() })
	return r
}

// wait returns the exit code of a logs process, which must end by itself.
func (r *logsRun) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
		return r.cmd.ProcessState.ExitCode()
	case <-time.After(20 * time.Second):
		t.Fatalf("logs did not end; stdout %q, stderr %q", r.stdout.String(), r.stderr.String())
		return 0
	}
}

// A job of the daemon's own worker: `logs --follow` shows its stdout and
// stderr apart as they come and ends with the job; `logs` afterwards shows
// them whole, one stream if asked.
func TestE2ELogsOfTheLocalWorker(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 1)
	ev := d.follow(t, 0)
	marker := filepath.Join(dir, "go-on")
	submit(t, d.c, "talk", "run", fmt.Sprintf("echo one; echo oops >&2; while [ ! -e %q ]; do sleep 0.02; done; echo two", marker))
	data := filepath.Join(dir, "data")
	lease := ev.next("lease.running", "talk").Lease

	f := startLogs(t, "talk", "--follow", "--server", d.url, "--data", data)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(f.stdout.String(), "one\n") {
		if time.Now().After(deadline) {
			t.Fatalf("logs --follow showed no output of the running job: stdout %q, stderr %q", f.stdout.String(), f.stderr.String())
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a bound
	}
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := f.wait(t); code != 0 || f.stdout.String() != "one\ntwo\n" || f.stderr.String() != "oops\n" {
		t.Fatalf("logs --follow: exit %d, stdout %q, stderr %q", code, f.stdout.String(), f.stderr.String())
	}

	for _, tc := range []struct {
		args           []string
		stdout, stderr string
	}{
		{nil, "one\ntwo\n", "oops\n"},
		{[]string{"--stream", "stderr"}, "", "oops\n"},
		{[]string{"--lease", fmt.Sprint(lease), "--stream", "stdout"}, "one\ntwo\n", ""},
	} {
		r := startLogs(t, append([]string{"talk", "--server", d.url, "--data", data}, tc.args...)...)
		if code := r.wait(t); code != 0 || r.stdout.String() != tc.stdout || r.stderr.String() != tc.stderr {
			t.Errorf("logs %v: exit %d, stdout %q, stderr %q; want %q, %q", tc.args, code, r.stdout.String(), r.stderr.String(), tc.stdout, tc.stderr)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nope"}, "not_found"},
		{[]string{"talk", "--lease", "99"}, "has no lease 99"},
		{[]string{"talk", "--stream", "both"}, "want stdout or stderr"},
	} {
		r := startLogs(t, append(tc.args, "--server", d.url, "--data", data)...)
		if code := r.wait(t); code == 0 || !strings.Contains(r.stderr.String(), tc.want) {
			t.Errorf("logs %v: exit %d, stderr %q; want an error saying %q", tc.args, code, r.stderr.String(), tc.want)
		}
	}
}

// A remote worker's job: the daemon says where its output is, and logs
// --workdir reads it on the worker's machine.
func TestE2ELogsOfARemoteWorker(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	ev := d.follow(t, 0)
	wdir := filepath.Join(dir, "w1")
	startWorker(t, d.url, "w1", wdir)
	submit(t, d.c, "far", "run", "echo from afar")
	ev.next("lease.reported", "far")

	r := startLogs(t, "far", "--server", d.url)
	if code := r.wait(t); code == 0 || !strings.Contains(r.stderr.String(), "worker w1") || !strings.Contains(r.stderr.String(), "--workdir") {
		t.Fatalf("logs of a remote worker's job: exit %d, stderr %q", code, r.stderr.String())
	}
	r = startLogs(t, "far", "--workdir", wdir, "--follow")
	if code := r.wait(t); code != 0 || r.stdout.String() != "from afar\n" {
		t.Fatalf("logs --workdir: exit %d, stdout %q, stderr %q", code, r.stdout.String(), r.stderr.String())
	}
}

// fakeOutput is an outputSource of scripted chunks, by stream.
type fakeOutput struct {
	chunks map[string][]chunk
	offs   map[string][]int64 // the offsets asked for
	fail   []error            // the next reads fail with these first
}

func (f *fakeOutput) read(_ context.Context, _ string, _ uint64, stream string, offset int64) (chunk, error) {
	if len(f.fail) > 0 {
		err := f.fail[0]
		f.fail = f.fail[1:]
		return chunk{}, err
	}
	f.offs[stream] = append(f.offs[stream], offset)
	cs := f.chunks[stream]
	if len(cs) == 0 {
		return chunk{final: true, lease: 2}, nil
	}
	f.chunks[stream] = cs[1:]
	return cs[0], nil
}

// A retry's output starts over from its first byte, announced once; the
// follow ends once every stream's last read was final.
func TestTailOutputFollowsARetry(t *testing.T) {
	src := &fakeOutput{offs: map[string][]int64{}, chunks: map[string][]chunk{
		"stdout": {
			{data: []byte("first\n"), lease: 1},
			{lease: 1},
			{data: []byte("xx"), lease: 2}, // read from the old offset: thrown away
			{data: []byte("second\n"), lease: 2},
		},
		"stderr": {{lease: 1}, {lease: 2, final: true}},
	}}
	var stdout, stderr, note bytes.Buffer
	out := map[string]io.Writer{"stdout": &stdout, "stderr": &stderr}
	if err := tailOutput(context.Background(), src, "j", 0, []string{"stdout", "stderr"}, out, true, &note); err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "first\nsecond\n" || stderr.String() != "" {
		t.Fatalf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
	if note.String() != "leaselog: job j: its output from lease 2 on\n" {
		t.Fatalf("note %q", note.String())
	}
	if got := fmt.Sprint(src.offs["stdout"]); got != "[0 6 6 0 7]" {
		t.Fatalf("stdout offsets asked %s", got)
	}
}

// A follow outlives a daemon out of reach (restarted): it says so once and
// resumes where it was. An error that is an answer ends it, as it ends a
// read without --follow.
func TestTailOutputOutlivesALostDaemon(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	script := func(fail ...error) *fakeOutput {
		return &fakeOutput{offs: map[string][]int64{}, fail: fail, chunks: map[string][]chunk{
			"stdout": {{data: []byte("a\n"), lease: 2}, {lease: 2}, {data: []byte("b\n"), lease: 2, final: true}},
		}}
	}
	for _, tc := range []struct {
		name      string
		src       *fakeOutput
		follow    bool
		out, note string
		errSays   string
	}{
		{"follow, the daemon away twice", script(refused, refused), true, "a\nb\n", "trying again", ""},
		{"follow, a 503", script(&api.Error{Status: 503, Code: api.CodeUnavailable, Message: "busy"}), true, "a\nb\n", "busy; trying again", ""},
		{"follow, a 404", script(&api.Error{Status: 404, Code: api.CodeNotFound, Message: "job j"}), true, "", "", "not_found: job j"},
		{"no follow, the daemon away", script(refused), false, "", "", "connection refused"},
	} {
		var stdout, note bytes.Buffer
		err := tailOutput(context.Background(), tc.src, "j", 0, []string{"stdout"}, map[string]io.Writer{"stdout": &stdout}, tc.follow, &note)
		if tc.errSays != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errSays) {
				t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.errSays)
			}
			continue
		}
		if err != nil || stdout.String() != tc.out || strings.Count(note.String(), "\n") != 1 || !strings.Contains(note.String(), tc.note) {
			t.Errorf("%s: %v, stdout %q, note %q", tc.name, err, stdout.String(), note.String())
		}
	}
}
