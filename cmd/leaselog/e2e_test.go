package main

// End-to-end tests: the real leaselog binary, started as a daemon and as
// workers, driven over HTTP on loopback with timings in fractions of a
// second, killed, paused and restarted with real signals. One test per row
// of the Leases page's "What happens" table, plus self-fencing and the
// daemon's lifecycle.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testutil"
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
	p := &proc{t: t, name: name, cmd: exec.Command(binary, args...), done: make(chan struct{})}
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
	cfg := filepath.Join(dir, "leaselog.toml")
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "serve", "serve", "--config", cfg, "--data", filepath.Join(dir, "data"))
	// The daemon logs the address it listens on; wait for that line.
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, line := range strings.Split(p.output(), "\n") {
			var l struct{ Message, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Message == "listening" {
				d := &daemonProc{proc: p, dir: dir, url: "http://" + l.Addr}
				c, err := api.NewClient(d.url, "")
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
func startWorker(t *testing.T, url, id, dir string) *proc {
	t.Helper()
	t.Cleanup(func() { killRuns(dir) })
	return startProc(t, "worker "+id, "worker", "--server", url, "--id", id, "--workdir", dir, "--capacity", "1", "--log-format", "json")
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
	f := &eventFlags{clientFlags: clientFlags{server: d.url}}
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
func TestE2EWorkerDiesDuringRun(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	ev := d.follow(t, 0)
	w := startWorker(t, d.url, "w1", filepath.Join(dir, "w1"))
	submit(t, d.c, "agent-1", "run", "sleep 60")
	running := ev.next("lease.running", "agent-1")
	w.signal(syscall.SIGKILL)
	expired := ev.next("lease.expired", "agent-1")
	if expired.Lease != running.Lease || expired.Reason != "worker lost" {
		t.Fatalf("expired %+v, want lease %d, worker lost", expired, running.Lease)
	}
	if j := job(t, d.c, "agent-1"); j.State != "failed" || j.Reason != "worker lost" || j.Attempts != 0 || j.Lease != nil {
		t.Fatalf("job after the worker died: %+v", j)
	}
}

// What happens: a worker dies during an evaluation. The evaluation is queued
// again, and the next lease carries a larger token.
func TestE2EWorkerDiesDuringEvaluation(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	ev := d.follow(t, 0)
	marker := filepath.Join(dir, "second-time")
	submit(t, d.c, "eval-1", "evaluation", fmt.Sprintf("if [ -e %q ]; then exit 0; fi; sleep 60", marker))
	w1 := startWorker(t, d.url, "w1", filepath.Join(dir, "w1"))
	first := ev.next("lease.running", "eval-1")
	w1.signal(syscall.SIGKILL)
	killRuns(filepath.Join(dir, "w1")) // the machine died with it
	if e := ev.next("lease.expired", "eval-1"); e.Reason != "lease expired" {
		t.Fatalf("expired %+v", e)
	}
	ev.next("lease.queued", "eval-1")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	startWorker(t, d.url, "w2", filepath.Join(dir, "w2"))
	second := ev.next("lease.acquired", "eval-1")
	if second.Lease <= first.Lease || second.Worker != "w2" {
		t.Fatalf("second lease %+v after %d", second, first.Lease)
	}
	rep := ev.next("lease.reported", "eval-1")
	if rep.Lease != second.Lease || rep.Outcome != "succeeded" {
		t.Fatalf("report %+v", rep)
	}
	if j := job(t, d.c, "eval-1"); j.State != "reported" || j.Attempts != 1 || j.Leases != 2 {
		t.Fatalf("job %+v: want reported, 1 attempt, 2 leases", j)
	}
}

// rawReport posts a report and returns the status and the body as bytes.
func rawReport(t *testing.T, url string, lease uint64, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(fmt.Sprintf("%s/v1/leases/%d/report", url, lease), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// What happens: a late report is refused (409), and kept as a
// lease.stale_report with the ref of its commits; auditors find it.
func TestE2ELateReport(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	ev := d.follow(t, 0)
	ctx := context.Background()
	submit(t, d.c, "j1", "run", "true")
	gs, err := d.c.Acquire(ctx, "w1", 1, time.Second)
	if err != nil || len(gs) != 1 {
		t.Fatalf("acquire: %v %v", gs, err)
	}
	ev.next("lease.expired", "j1") // w1 (this test) never heartbeats
	body := `{"worker":"w1","outcome":"succeeded","ref":"refs/leaselog/j1/late"}`
	status, first := rawReport(t, d.url, gs[0].Lease, body)
	var stale api.ErrorBody
	if err := json.Unmarshal(first, &stale); err != nil || status != http.StatusConflict || stale.Error.Code != api.CodeStaleLease || stale.StaleReportSeq == 0 {
		t.Fatalf("late report: %d %s", status, first)
	}
	if status, again := rawReport(t, d.url, gs[0].Lease, body); status != http.StatusConflict || !bytes.Equal(again, first) {
		t.Fatalf("the same late report again: %d %s, first %s", status, again, first)
	}
	out, err := exec.Command(binary, "audit", "stale-reports", "--server", d.url, "--job", "j1", "-o", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("audit: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var e api.Event
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &e) != nil || e.Seq != stale.StaleReportSeq || e.Ref != "refs/leaselog/j1/late" {
		t.Fatalf("audit stale-reports printed %q, want the one stale report (seq %d) with its ref", out, stale.StaleReportSeq)
	}
	if j := job(t, d.c, "j1"); j.State != "failed" || j.Attempts != 0 {
		t.Fatalf("the stale report changed the job: %+v", j)
	}
}

// What happens: the same report twice. The second gets the first's answer,
// byte for byte, and nothing is counted twice.
func TestE2ESameReportTwice(t *testing.T) {
	d := startServe(t, t.TempDir(), 0)
	ctx := context.Background()
	submit(t, d.c, "e1", "evaluation", "true")
	gs, err := d.c.Acquire(ctx, "w1", 1, time.Second)
	if err != nil || len(gs) != 1 {
		t.Fatalf("acquire: %v %v", gs, err)
	}
	body := `{"worker":"w1","outcome":"succeeded","result":{"score":0.9}}`
	s1, b1 := rawReport(t, d.url, gs[0].Lease, body)
	s2, b2 := rawReport(t, d.url, gs[0].Lease, body)
	if s1 != http.StatusOK || s2 != http.StatusOK || !bytes.Equal(b1, b2) {
		t.Fatalf("reports answered %d %s, then %d %s", s1, b1, s2, b2)
	}
	if j := job(t, d.c, "e1"); j.Attempts != 1 || j.State != "reported" {
		t.Fatalf("job %+v", j)
	}
	if h := history(t, d.c, "e1"); strings.Count(strings.Join(h, " "), "lease.reported") != 1 {
		t.Fatalf("history %v", h)
	}
}

// What happens: the machine sleeps. The daemon is paused (SIGSTOP) past
// toleration, then continued: the gap is its own absence, nothing expires,
// and the job its local worker runs finishes and is reported.
func TestE2EDaemonPausedPastToleration(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 1)
	t.Cleanup(func() { killRuns(filepath.Join(dir, "data", "work")) })
	ev := d.follow(t, 0)
	gate := filepath.Join(dir, "go")
	submit(t, d.c, "agent-1", "run", fmt.Sprintf("while [ ! -e %q ]; do sleep 0.02; done", gate))
	running := ev.next("lease.running", "agent-1")

	d.signal(syscall.SIGSTOP)
	time.Sleep(2 * toleration) // not synchronisation: this is the absence under test
	d.signal(syscall.SIGCONT)

	resumed := ev.next("daemon.resumed", "")
	if resumed.GapSeconds < (2 * toleration).Seconds() {
		t.Fatalf("resumed after a gap of %.2fs, want at least %.2fs", resumed.GapSeconds, (2 * toleration).Seconds())
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := ev.next("lease.reported", "agent-1")
	if rep.Lease != running.Lease || rep.Outcome != "succeeded" {
		t.Fatalf("report %+v, want lease %d succeeded", rep, running.Lease)
	}
	for _, typ := range history(t, d.c, "agent-1") {
		if typ == "lease.expired" {
			t.Fatal("a lease expired because the daemon was paused")
		}
	}
}

// What happens: leaselog serve restarts. The daemon is SIGKILLed with an
// agent running; restarted, its table is the one it had, the local worker
// re-attaches to the agent, the agent finishes and its report is accepted.
func TestE2EDaemonKilledAndRestarted(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { killRuns(filepath.Join(dir, "data", "work")) })
	d := startServe(t, dir, 1)
	ev := d.follow(t, 0)
	gate := filepath.Join(dir, "go")
	submit(t, d.c, "agent-1", "run", fmt.Sprintf("while [ ! -e %q ]; do sleep 0.02; done; echo finished", gate))
	submit(t, d.c, "queued-1", "evaluation", "true")
	running := ev.next("lease.running", "agent-1")
	before := tableOf(t, d.c)

	d.signal(syscall.SIGKILL)
	d.wait()
	d2 := startServe(t, dir, 1)
	if after := tableOf(t, d2.c); after != before {
		t.Fatalf("table after restart:\n%s\nbefore:\n%s", after, before)
	}
	// A second daemon on the same data directory is refused, clearly.
	third := startProc(t, "second serve", "serve", "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0")
	if code := third.wait(); code == 0 || !strings.Contains(third.output(), "in use by another leaselog") {
		t.Fatalf("second serve on the same data: exit %d\n%s", code, third.output())
	}

	ev2 := d2.follow(t, running.Seq)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := ev2.next("lease.reported", "agent-1")
	if rep.Lease != running.Lease || rep.Outcome != "succeeded" || rep.Worker != "local" {
		t.Fatalf("report after restart %+v, want lease %d succeeded by local", rep, running.Lease)
	}
	if j := job(t, d2.c, "agent-1"); j.Attempts != 1 || j.Leases != 1 {
		t.Fatalf("job %+v", j)
	}
}

// tableOf renders the jobs and leases the daemon serves, without the times
// that a heartbeat moves.
func tableOf(t *testing.T, c *api.Client) string {
	t.Helper()
	ctx := context.Background()
	js, err := c.Jobs(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, j := range js {
		lease := uint64(0)
		if j.Lease != nil {
			lease = j.Lease.Lease
		}
		fmt.Fprintf(&b, "job %s %s %s attempts=%d leases=%d lease=%d outcome=%s reason=%q\n", j.ID, j.Kind, j.State, j.Attempts, j.Leases, lease, j.Outcome, j.Reason)
	}
	ls, err := c.Leases(ctx, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		fmt.Fprintf(&b, "lease %d %s %s %s revoke=%s\n", l.Lease, l.Job, l.Worker, l.State, l.Revoke)
	}
	return b.String()
}

// Edge: queued --> cancelled, the daemon stops first. SIGTERM cancels queued
// jobs, records daemon.stopping, and exits 0.
func TestE2EStopWithQueuedJobs(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	submit(t, d.c, "q1", "run", "true")
	submit(t, d.c, "q2", "evaluation", "true")
	d.signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM", code)
	}
	out, err := exec.Command(binary, "replay", "--data", filepath.Join(dir, "data"), "--verify").CombinedOutput()
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	for _, want := range []string{`job q1 run cancelled attempts=0 leases=0 reason="daemon stopped"`, `job q2 evaluation cancelled attempts=0 leases=0 reason="daemon stopped"`, "verified:"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("replay after stop lacks %q:\n%s", want, out)
		}
	}
}

// Self-fencing: the network between a worker and the daemon is cut. The
// worker stops its job before the daemon expires the lease.
func TestE2ESelfFencingStopsTheJobBeforeExpiry(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	ev := d.follow(t, 0)
	proxy := newProxy(t, strings.TrimPrefix(d.url, "http://"))
	wdir := filepath.Join(dir, "w1")
	startWorker(t, "http://"+proxy.addr(), "w1", wdir)
	submit(t, d.c, "agent-1", "run", "sleep 60")
	running := ev.next("lease.running", "agent-1")
	pid := readPid(t, filepath.Join(wdir, fmt.Sprintf("agent-1-%d", running.Lease), ".leaselog", "pid"))

	died := make(chan time.Time, 1)
	go func() { // watch the job's process until it is dead (gone, or a zombie)
		for alive(pid) {
			time.Sleep(2 * time.Millisecond)
		}
		died <- time.Now()
	}()
	proxy.cut()
	expired := ev.next("lease.expired", "agent-1")
	var diedAt time.Time
	select {
	case diedAt = <-died:
	default:
		t.Fatalf("the job still runs after its lease expired at %v", expired.Time)
	}
	if !diedAt.Before(expired.Time) {
		t.Fatalf("the job stopped at %v, after its lease expired at %v", diedAt, expired.Time)
	}
	t.Logf("job stopped %v before its lease expired", expired.Time.Sub(diedAt))
}

// alive reports whether process pid exists and is not a zombie.
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

// proxy forwards TCP to the daemon until cut, then refuses and drops
// everything: a network partition between one worker and the daemon.
type proxyConn struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	dead  bool
}

func newProxy(t *testing.T, target string) *proxyConn {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxyConn{ln: ln}
	t.Cleanup(p.cut)
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			if p.dead {
				in.Close()
				out.Close()
			}
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return p
}

func (p *proxyConn) addr() string { return p.ln.Addr().String() }

func (p *proxyConn) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dead = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}
