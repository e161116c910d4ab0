package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
	"github.com/leaselog/leaselog/worker"
	"github.com/leaselog/leaselog/worker/local/supervise"
)

// waitBound bounds every wait of these tests: a test that waits longer
// fails rather than hangs. Nothing here should take more than a second.
const waitBound = 10 * time.Second

// The fake daemon of TestJobSurvivesItsDaemon: the test binary, run again
// with these variables, starts one job and waits to be killed.
const (
	daemonDirEnv   = "LOCALTEST_DAEMON_DIR"
	daemonGrantEnv = "LOCALTEST_DAEMON_GRANT"
	// daemonFenceEnv, if set, is how long after the job's start (a Go
	// duration) the fake daemon sets its fence deadline, on fenceClock;
	// counted from the start, not from the test's, so that a slow start of
	// the fake daemon on a loaded machine does not eat the job's time.
	daemonFenceEnv = "LOCALTEST_DAEMON_FENCE"
)

func TestMain(m *testing.M) {
	supervise.Init() // this binary is the jobs' supervisor too
	if os.Getenv(daemonDirEnv) != "" {
		os.Exit(fakeDaemon())
	}
	os.Exit(m.Run())
}

// fakeDaemon starts the job of the grant in its environment, says
// "started" and the fence deadline it set (Unix ns, 0 for none) on stdout,
// and waits for the job (it is killed long before).
func fakeDaemon() int {
	var g api.Grant
	if err := json.Unmarshal([]byte(os.Getenv(daemonGrantEnv)), &g); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	e, err := New(Options{Dir: os.Getenv(daemonDirEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	r, err := e.Start(context.Background(), g)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var deadline int64
	if v := os.Getenv(daemonFenceEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		at := fenceClock.Now().Add(d)
		r.Fence(at)
		deadline = at.UnixNano()
	}
	fmt.Println("started", deadline)
	<-r.Done()
	return 0
}

// newExecutor returns an executor on dir that logs to the returned buffer,
// printed if the test fails.
func newExecutor(t *testing.T, dir string, grace time.Duration) (*Executor, *testutil.SyncBuffer) {
	t.Helper()
	return newExecutorWith(t, Options{Dir: dir, StopGrace: grace})
}

// newExecutorWith is newExecutor with more options: its logger and poll are
// the tests'.
func newExecutorWith(t *testing.T, opts Options) (*Executor, *testutil.SyncBuffer) {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	opts.Logger, opts.Poll = zerolog.New(logs), 10*time.Millisecond
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("executor log:\n%s", logs)
		}
	})
	return e, logs
}

func grant(t *testing.T, job string, lease uint64, s api.Spec) api.Grant {
	t.Helper()
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return api.Grant{Lease: lease, Job: api.Job{ID: job, Kind: "run", Spec: raw}}
}

// runDirOf is where e runs the job of g.
func runDirOf(e *Executor, g api.Grant) string {
	return filepath.Join(e.dir, g.Job.ID+"-"+strconv.FormatUint(g.Lease, 10))
}

// start starts g's job and makes sure it is gone when the test ends, even a
// failed one: its process group is killed, and its Done awaited.
func start(t *testing.T, e *Executor, g api.Grant) worker.Run {
	t.Helper()
	r, err := e.Start(context.Background(), g)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	track(t, runDirOf(e, g), r)
	return r
}

func track(t *testing.T, dir string, r worker.Run) {
	t.Cleanup(func() {
		if pid, err := readPid(dir); err == nil && groupAlive(pid, dir) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		select {
		case <-r.Done():
		case <-time.After(waitBound):
			t.Errorf("run in %s did not end", dir)
		}
	})
}

// await waits for a run to end and returns its outcome.
func await(t *testing.T, r worker.Run) worker.Outcome {
	t.Helper()
	select {
	case <-r.Done():
		return r.Outcome()
	case <-time.After(waitBound):
		t.Fatalf("run not done after %v", waitBound)
		return worker.Outcome{}
	}
}

func isDone(r worker.Run) bool {
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}

// fifo makes a named pipe in a fresh directory: a job signals the test by
// writing to one, and waits for the test by reading from another.
func fifo(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// readFIFO reads what a job writes to a named pipe, until it closes it.
func readFIFO(t *testing.T, path string) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(path)
		got <- string(b)
	}()
	select {
	case s := <-got:
		return s
	case <-time.After(waitBound):
		// Unblock the reader's open, so that it does not outlive the test.
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatalf("nothing written to %s after %v", path, waitBound)
		return ""
	}
}

// writeFIFO writes to a named pipe a job reads.
func writeFIFO(t *testing.T, path, s string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString(s)
			err = errors.Join(err, f.Close())
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitBound):
		if f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatalf("nobody read %s after %v", path, waitBound)
	}
}

// q quotes s for sh.
func q(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func readState(t *testing.T, e *Executor, g api.Grant, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(runDirOf(e, g), stateDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func pidOf(t *testing.T, e *Executor, g api.Grant) int {
	t.Helper()
	pid, err := readPid(runDirOf(e, g))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func getsid(pid int) int {
	sid, _, errno := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(pid), 0, 0)
	if errno != 0 {
		return -1
	}
	return int(sid)
}

func sameOutcome(a, b worker.Outcome) bool {
	return a.Outcome == b.Outcome && a.Ref == b.Ref && a.Reason == b.Reason && bytes.Equal(a.Result, b.Result)
}

func wantOutcome(t *testing.T, got worker.Outcome, outcome, reason string) {
	t.Helper()
	if got.Outcome != outcome || got.Reason != reason {
		t.Fatalf("outcome %q, reason %q; want %q, %q", got.Outcome, got.Reason, outcome, reason)
	}
}

// gitT runs git in dir for a test.
func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// newRepo makes a repository with one commit (base.txt), whose own config
// names the committer: the tests need no git configuration of the machine.
func newRepo(t *testing.T) string {
	t.Helper()
	repo := t.TempDir()
	gitT(t, repo, "init", "-q")
	gitT(t, repo, "config", "user.name", "Test")
	gitT(t, repo, "config", "user.email", "test@example.com")
	gitT(t, repo, "config", "commit.gpgsign", "false")
	commitFile(t, repo, "base.txt", "base\n", "base")
	return repo
}

func commitFile(t *testing.T, repo, name, content, msg string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(repo, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	gitT(t, repo, "add", name)
	gitT(t, repo, "commit", "-q", "-m", msg)
}

// readLine reads one line from r within waitBound.
func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		s, _ := r.ReadString('\n')
		got <- s
	}()
	select {
	case s := <-got:
		return strings.TrimSpace(s)
	case <-time.After(waitBound):
		t.Fatalf("no line after %v", waitBound)
		return ""
	}
}

// startFakeDaemon starts g's job under dir from another process (this test
// binary run again, see fakeDaemon), with the fence deadline fence (a
// Boottime reading) unless it is zero, and returns once the job is started.
func startFakeDaemon(t *testing.T, dir string, g api.Grant, fence time.Duration) (*exec.Cmd, time.Time) {
	t.Helper()
	gj, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	daemon := exec.Command(os.Args[0], "-test.run=^$")
	daemon.Env = append(os.Environ(), daemonDirEnv+"="+dir, daemonGrantEnv+"="+string(gj))
	if fence > 0 {
		daemon.Env = append(daemon.Env, daemonFenceEnv+"="+fence.String())
	}
	daemon.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	daemon.Stderr = os.Stderr
	stdout, err := daemon.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if daemon.ProcessState == nil {
			_ = syscall.Kill(-daemon.Process.Pid, syscall.SIGKILL)
			_ = daemon.Wait()
		}
	})
	line := readLine(t, bufio.NewReader(stdout))
	ns, ok := strings.CutPrefix(line, "started ")
	deadline, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil {
		t.Fatalf("fake daemon said %q", line)
	}
	if deadline == 0 {
		return daemon, time.Time{}
	}
	return daemon, time.Unix(0, deadline)
}

// killFakeDaemon kills the fake daemon with its whole process group —
// SIGTERM, then SIGKILL, as a service manager or a ^C would.
func killFakeDaemon(t *testing.T, daemon *exec.Cmd) {
	t.Helper()
	// Not yet reaped, so its group id is still its own.
	_ = syscall.Kill(-daemon.Process.Pid, syscall.SIGTERM)
	_ = syscall.Kill(-daemon.Process.Pid, syscall.SIGKILL)
	if err := daemon.Wait(); err == nil {
		t.Fatal("the fake daemon was not killed")
	}
}
