package main

// The harness of the end-to-end tests (e2e_test.go) and the kill test: the
// real binary built once, daemons and workers as child processes, their
// event streams, and a TCP proxy that can cut a worker off.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
)

// binary is the leaselog binary built once for these tests.
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	if !needsBinary() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "leaselog-e2e-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "leaselog")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build leaselog: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needsBinary is false for a run that can only fuzz (a fuzzing worker, or
// -run '^$' -fuzz without -bench): its fuzz target needs no binary, and
// building one in the coordinator and again in every worker would eat the
// fuzzing time.
func needsBinary() bool {
	get := func(name string) string {
		if f := flag.Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	if get("test.fuzzworker") == "true" {
		return false
	}
	return get("test.fuzz") == "" || get("test.run") != "^$" || get("test.bench") != ""
}

// Fast timings: renew 0.1s, grace 0.5s, toleration 1.5s; the worker fences
// itself 1.3s after its last acknowledged heartbeat.
const (
	renew      = 100 * time.Millisecond
	toleration = 1500 * time.Millisecond
)

func config(capacity int) string {
	return fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
[plugins.executor]
renew_seconds = 0.1
grace_seconds = 0.5
toleration_seconds = 1.5
local_capacity = %d
[log]
level = "debug"
`, capacity)
}

// proc is a leaselog process with its output kept for the failure message.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	out  testutil.SyncBuffer
	done chan struct{}
	err  error
}

func (p *proc) output() string { return p.out.String() }

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startProcIn(t, name, "", nil, args...)
}

// startProcIn is startProc with a working directory and an environment
// ("" and nil: the test's own).
func startProcIn(t *testing.T, name, cwd string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, cmd: exec.Command(binary, args...), done: make(chan struct{})}
	p.cmd.Dir, p.cmd.Env = cwd, env
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			out := p.output()
			if len(out) > 64<<10 { // a daemon of a kill test logs thousands of events
				out = "…" + out[len(out)-64<<10:]
			}
			t.Logf("--- %s output:\n%s", p.name, out)
		}
	})
	return p
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: %v: %v", p.name, sig, err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("%s did not exit", p.name)
	}
	return p.cmd.ProcessState.ExitCode()
}

// daemon is a running `leaselog serve`.
type daemonProc struct {
	*proc
	dir, url string
	c        *api.Client
}

func startServe(t *testing.T, dir string, capacity int) *daemonProc {
	t.Helper()
	return startServeConfig(t, dir, config(capacity))
}

// startServeConfig starts `leaselog serve` on dir's data with the
// configuration text, and returns once it listens.
func startServeConfig(t *testing.T, dir, text string) *daemonProc {
	t.Helper()
	return startServeArgs(t, dir, text)
}

// startServeArgs is startServeConfig with more flags for serve.
func startServeArgs(t *testing.T, dir, text string, args ...string) *daemonProc {
	t.Helper()
	cfg := filepath.Join(dir, "leaselog.toml")
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "serve", append([]string{"serve", "--config", cfg, "--data", filepath.Join(dir, "data")}, args...)...)
	// The daemon logs the address it listens on; wait for that line.
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, line := range strings.Split(p.output(), "\n") {
			var l struct{ Message, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Message == "listening" {
				d := &daemonProc{proc: p, dir: dir, url: "http://" + l.Addr}
				// With a local worker and no [auth], the daemon generated an
				// admin token (token.go); its user's clients read it.
				token, err := clientToken(d.url, filepath.Join(dir, "data"))
				if err != nil {
					t.Fatal(err)
				}
				c, err := api.NewClient(d.url, token)
				if err != nil {
					t.Fatal(err)
				}
				d.c = c
				return d
			}
		}
		select {
		case <-p.done:
			t.Fatalf("serve exited: %v\n%s", p.err, p.output())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", p.output())
		}
	}
}

// startWorker runs `leaselog worker` against url, with its jobs under dir.
func startWorker(t *testing.T, url, id, dir string, flags ...string) *proc {
	t.Helper()
	t.Cleanup(func() { killRuns(dir) })
	return startProc(t, "worker "+id, append([]string{"worker", "--server", url, "--id", id, "--workdir", dir, "--capacity", "1", "--log-format", "json"}, flags...)...)
}

// killRuns kills what is left of the jobs run under dir: jobs outlive their
// workers by design, so a test must end them itself.
func killRuns(dir string) {
	pids, _ := filepath.Glob(filepath.Join(dir, "*", ".leaselog", "pid"))
	for _, f := range pids {
		if b, err := os.ReadFile(f); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	}
}

// events follows the daemon's event stream from seq after.
type events struct {
	t  *testing.T
	ch chan api.Event
}

func (d *daemonProc) follow(t *testing.T, after uint64) *events {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ev := &events{t: t, ch: make(chan api.Event, 1024)}
	f := &eventFlags{clientFlags: clientFlags{server: d.url, data: filepath.Join(d.dir, "data")}}
	go func() {
		_ = f.stream(ctx, after, func(e api.Event) { ev.ch <- e })
		close(ev.ch)
	}()
	return ev
}

// next returns the next event of type typ (and job, if given), skipping others.
func (ev *events) next(typ, job string) api.Event {
	ev.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case e, ok := <-ev.ch:
			if !ok {
				ev.t.Fatalf("event stream ended waiting for %s %s", typ, job)
			}
			if e.Type == typ && (job == "" || e.Job == job) {
				return e
			}
		case <-timeout:
			ev.t.Fatalf("no %s event for job %q", typ, job)
		}
	}
}

func submit(t *testing.T, c *api.Client, id, kind, run string) {
	t.Helper()
	spec, _ := json.Marshal(api.Spec{Run: run})
	if _, _, err := c.Submit(context.Background(), api.Submit{ID: id, Kind: kind, Spec: spec}); err != nil {
		t.Fatal(err)
	}
}

func job(t *testing.T, c *api.Client, id string) api.Job {
	t.Helper()
	j, err := c.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func history(t *testing.T, c *api.Client, id string) []string {
	t.Helper()
	es, err := c.History(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range es {
		types = append(types, e.Type)
	}
	return types
}

// What happens: a worker dies during a run. The run fails as "worker lost";
// it is not an attempt.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}
