package main

// The fence, end to end: a `leaselog worker` process talks to the daemon
// through an HTTP-aware TCP proxy written here, which knows when each
// heartbeat passed and can cut the worker off right after one was answered.
// The worker makes plain calls (--protocol http), which the proxy reads:
// the fence is the worker's core's, the same over either transport.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Timings of these tests: renew 0.2s, toleration 2s. The worker fences
// itself 1.6s after sending its last acknowledged heartbeat; the daemon
// expires no sooner than 2s after receiving it.
const (
	fenceRenew      = 200 * time.Millisecond
	fenceToleration = 2 * time.Second
	fenceFence      = fenceToleration - 2*fenceRenew
	fenceConfig     = `
[server]
listen = "127.0.0.1:0"
[plugins.executor]
renew_seconds = 0.2
grace_seconds = 1
toleration_seconds = 2
local_capacity = 0
[log]
level = "debug"
`
)

// TestE2EFenceFallsInTheWindow: the network between a worker and the daemon
// is cut right after a heartbeat naming the job's lease was answered. The
// job stops after toleration − 2×renew from that heartbeat's send, before
// toleration from its receipt, and the lease expires after the job stopped.
//
// The proxy read the heartbeat at seen: the worker sent it before, the
// daemon received it after. So the job must stop before seen + toleration,
// and not before seen + toleration − 2×renew, less the little the request
// took to reach the proxy (slack, renew/2: a fence moved by as much fails).
func TestE2EFenceFallsInTheWindow(t *testing.T) {
	const slack = fenceRenew / 2
	dir := t.TempDir()
	d := startServeConfig(t, dir, fenceConfig)
	ev := d.follow(t, 0)
	px := newFenceProxy(t, strings.TrimPrefix(d.url, "http://"))
	startWorker(t, "http://"+px.addr(), "w1", filepath.Join(dir, "w1"), "--protocol", "http")

	pidFile := filepath.Join(dir, "job.pid")
	submit(t, d.c, "agent-1", "run", fmt.Sprintf("echo $$ > %s; exec sleep 60", pidFile))
	running := ev.next("lease.running", "agent-1")
	pid := fenceJobPid(t, pidFile)
	died := fenceWatch(pid)

	seen := px.cutAfterHeartbeat(t, running.Lease)
	var diedAt time.Time
	select {
	case diedAt = <-died:
	case <-time.After(10 * time.Second):
		t.Fatalf("the job still runs %v after the last acknowledged heartbeat", time.Since(seen))
	}
	expired := ev.next("lease.expired", "agent-1")
	after := diedAt.Sub(seen)
	t.Logf("job stopped %v after the last acknowledged heartbeat passed the proxy (window %v–%v); lease expired %v after it",
		after, fenceFence, fenceToleration, expired.Time.Sub(seen))
	if after < fenceFence-slack {
		t.Errorf("the job stopped %v after the last acknowledged heartbeat: before the fence (%v)", after, fenceFence)
	}
	if after >= fenceToleration {
		t.Errorf("the job stopped %v after the last acknowledged heartbeat: not before toleration (%v)", after, fenceToleration)
	}
	if !diedAt.Before(expired.Time) {
		t.Errorf("the job stopped at %v, not before its lease expired at %v", diedAt, expired.Time)
	}
}

// TestE2EIdleWorkerTakesItsFirstJob: a worker long-polls for 30s, far longer
// than the fence (1.6s). A job submitted once its poll has waited past the
// fence is granted to it, and the worker runs it: the grant counts from
// when the daemon granted it (held_seconds), not from the poll's send.
func TestE2EIdleWorkerTakesItsFirstJob(t *testing.T) {
	dir := t.TempDir()
	d := startServeConfig(t, dir, fenceConfig)
	ev := d.follow(t, 0)
	px := newFenceProxy(t, strings.TrimPrefix(d.url, "http://"))
	startWorker(t, "http://"+px.addr(), "w1", filepath.Join(dir, "w1"), "--protocol", "http")

	// The condition is the scenario itself: a poll held past the fence.
	deadline := time.Now().Add(30 * time.Second)
	for {
		since, ok := px.pendingAcquire()
		if ok && time.Since(since) > fenceToleration {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no acquire held past toleration")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pidFile := filepath.Join(dir, "job.pid")
	submit(t, d.c, "agent-1", "run", fmt.Sprintf("echo $$ > %s; exec sleep 60", pidFile))
	// Running, or lost: a worker that counted from the poll's send would
	// report the grant past its fence.
	timeout := time.After(30 * time.Second)
	for started := false; !started; {
		select {
		case e, ok := <-ev.ch:
			switch {
			case !ok:
				t.Fatal("event stream ended")
			case e.Job != "agent-1":
			case e.Type == "lease.running":
				started = true
			case e.Type == "lease.lost" || e.Type == "lease.expired":
				t.Fatalf("the first job was not run: %s %+v", e.Type, e)
			}
		case <-timeout:
			t.Fatal("the first job did not start")
		}
	}
	pid := fenceJobPid(t, pidFile)
	if !alive(pid) {
		t.Fatal("the job is not running")
	}
	if j := job(t, d.c, "agent-1"); j.State != "running" {
		t.Fatalf("job %+v, want running", j)
	}
}

// fenceJobPid waits for the job to write its pid, and kills it when the
// test ends (jobs outlive their workers by design).
func fenceJobPid(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if s := string(b); err == nil && strings.HasSuffix(s, "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job did not write %s", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fenceWatch sends the time process pid is first seen dead (gone, or a
// zombie).
func fenceWatch(pid int) <-chan time.Time {
	died := make(chan time.Time, 1)
	go func() {
		for alive(pid) {
			time.Sleep(time.Millisecond)
		}
		died <- time.Now()
	}()
	return died
}

// fenceProxy forwards HTTP/1.1 between workers and the daemon, one request
// at a time per connection as Go's client sends them, and notes when each
// passed. Armed with a lease, it cuts every connection (and refuses new
// ones) right after forwarding a quick answer to a heartbeat that names it.
type fenceProxy struct {
	target string
	ln     net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	dead   bool
	arm    uint64                      // cut after a heartbeat naming this lease; 0: not armed
	cutAt  chan time.Time              // when the heartbeat it cut after was read
	polls  map[*http.Request]time.Time // acquires not answered yet, by when they were read
}

func newFenceProxy(t *testing.T, target string) *fenceProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &fenceProxy{target: target, ln: ln, cutAt: make(chan time.Time, 1), polls: map[*http.Request]time.Time{}}
	t.Cleanup(p.cut)
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(in)
		}
	}()
	return p
}

func (p *fenceProxy) addr() string { return p.ln.Addr().String() }

// track adds c to the connections a cut closes; false if cut already.
func (p *fenceProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *fenceProxy) serve(in net.Conn) {
	if !p.track(in) {
		return
	}
	out, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(out) {
		in.Close()
		return
	}
	defer in.Close()
	defer out.Close()
	fromWorker, fromDaemon := bufio.NewReader(in), bufio.NewReader(out)
	for {
		req, err := http.ReadRequest(fromWorker)
		if err != nil {
			return
		}
		seen := time.Now()
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		acquire := strings.HasSuffix(req.URL.Path, "/acquire")
		if acquire {
			p.mu.Lock()
			p.polls[req] = seen
			p.mu.Unlock()
		}
		err = req.Write(out)
		var resp *http.Response
		if err == nil {
			resp, err = http.ReadResponse(fromDaemon, req)
		}
		if acquire {
			p.mu.Lock()
			delete(p.polls, req)
			p.mu.Unlock()
		}
		if err != nil {
			return
		}
		err = resp.Write(in)
		resp.Body.Close()
		if err != nil {
			return
		}
		// Only a quick answer is surely acknowledged: one slower than the
		// worker's heartbeat timeout (renew) would count as lost.
		quick := time.Since(seen) < fenceRenew/2
		if quick && strings.HasSuffix(req.URL.Path, "/heartbeat") && p.names(body) {
			p.cut()
			select { // the first cut only: every other connection ends with it
			case p.cutAt <- seen:
			default:
			}
			return
		}
	}
}

// names reports whether a heartbeat's body names the armed lease.
func (p *fenceProxy) names(body []byte) bool {
	p.mu.Lock()
	lease := p.arm
	p.mu.Unlock()
	if lease == 0 {
		return false
	}
	var hb struct{ Leases []uint64 }
	if json.Unmarshal(body, &hb) != nil {
		return false
	}
	for _, id := range hb.Leases {
		if id == lease {
			return true
		}
	}
	return false
}

// cutAfterHeartbeat arms the proxy and returns when the heartbeat it cut
// after was read from the worker.
func (p *fenceProxy) cutAfterHeartbeat(t *testing.T, lease uint64) time.Time {
	t.Helper()
	p.mu.Lock()
	p.arm = lease
	p.mu.Unlock()
	select {
	case at := <-p.cutAt:
		return at
	case <-time.After(10 * time.Second):
		t.Fatalf("no heartbeat named lease %d", lease)
		panic("unreachable")
	}
}

// pendingAcquire returns when the oldest acquire not answered yet was read.
func (p *fenceProxy) pendingAcquire() (since time.Time, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, at := range p.polls {
		if !ok || at.Before(since) {
			since, ok = at, true
		}
	}
	return since, ok
}

func (p *fenceProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return
	}
	p.dead = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}
