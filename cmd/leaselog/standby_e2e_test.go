package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/natstest"
)

// freeAddr is a loopback address nothing listens on now, for a daemon that
// must listen on the same address as a standby and once active: a worker's
// list of servers names it before it takes over. Its port is below the
// kernel's ephemeral range, which a listener on port 0 (every other test's)
// or an outgoing connection is given from, so that none of them can take it
// between this check and the daemon's listen.
func freeAddr(t *testing.T) string {
	t.Helper()
	low := 32768 // Linux's default ip_local_port_range starts here
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	if low <= 10000 {
		t.Skipf("the ephemeral port range starts at %d: no port below it to choose from", low)
	}
	for range 100 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(10000+rand.IntN(low-10000)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken: another
		}
		ln.Close()
		return addr
	}
	t.Fatalf("no free port in 10000..%d after 100 tries", low-1)
	return ""
}

// pollEvents polls c until the events of q satisfy ok, and returns them.
func pollEvents(t *testing.T, c *api.Client, q api.EventQuery, what string, ok func([]api.Event) bool) []api.Event {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		es, err := c.Events(context.Background(), q)
		if err == nil && ok(es.Events) {
			return es.Events
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s: last %+v, %v", what, es.Events, err)
		}
		time.Sleep(20 * time.Millisecond) // a poll's interval, under a deadline
	}
}

// TestJetStreamWorkerFollowsStandby: a real `leaselog worker --server
// ACTIVE,STANDBY` runs a job when the active daemon is SIGKILLed; the
// standby takes over on its address within grace, the worker's heartbeats
// reach it (the same lease heartbeats after the takeover), nothing expires,
// and the job, let finish, is reported once, succeeded. One NATS server
// (R1); TestJetStreamClusterWorkerFollowsStandby runs it on three.
func TestJetStreamWorkerFollowsStandby(t *testing.T) {
	ns := runNATS(t)
	workerFollowsStandby(t, jetStreamText(ns.ClientURL()), jetStreamGrace, nil)
}

// workerFollowsStandby is the scenario of TestJetStreamWorkerFollowsStandby
// on daemons configured with text, of grace grace; with nodes (the NATS
// cluster of text), the node leading the stream is shut down with the SIGKILL.
func workerFollowsStandby(t *testing.T, text string, grace time.Duration, nodes []*server.Server) {
	activeAddr, standbyAddr := freeAddr(t), freeAddr(t)
	listen := func(addr string) string {
		return strings.Replace(text, `listen = "127.0.0.1:0"`, fmt.Sprintf("listen = %q", addr), 1)
	}
	a := startServeConfig(t, t.TempDir(), listen(activeAddr))
	b := startStandby(t, "standby", t.TempDir(), listen(standbyAddr))
	waitAddr(t, b, "standby: answering 503 until this daemon leads")

	// The standby names the active daemon in a header, for clients.
	res, err := http.Get("http://" + standbyAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get(api.HeaderRole) != api.RoleStandby ||
		res.Header.Get(api.HeaderActive) != "http://"+activeAddr {
		t.Fatalf("the standby's /healthz: %d %s=%q %s=%q; want 503 standby naming http://%s", res.StatusCode,
			api.HeaderRole, res.Header.Get(api.HeaderRole), api.HeaderActive, res.Header.Get(api.HeaderActive), activeAddr)
	}

	work := t.TempDir()
	gate := filepath.Join(t.TempDir(), "go")
	submit(t, a.c, "j1", "run", fmt.Sprintf("while [ ! -e %q ]; do sleep 0.02; done", gate))
	startWorker(t, "http://"+activeAddr+",http://"+standbyAddr, "w1", work)
	running := pollEvents(t, a.c, api.EventQuery{Type: "lease.running", Job: "j1"}, "lease.running of j1",
		func(es []api.Event) bool { return len(es) == 1 })[0]

	var streamLeader *server.Server
	if nodes != nil {
		streamLeader = natstest.StreamLeader(t, nodes, defaultStream)
	}
	a.signal(syscall.SIGKILL)
	killed := time.Now()
	if streamLeader != nil {
		streamLeader.Shutdown()
	}
	a.wait()
	if addr := waitListening(t, b); addr != standbyAddr {
		t.Fatalf("the standby took over on %s, want its address %s", addr, standbyAddr)
	}
	took := time.Since(killed)
	t.Logf("the standby listens %v after the SIGKILL (grace %v)", took.Round(time.Millisecond), grace)
	if took > grace {
		t.Errorf("takeover took %v, more than grace (%v)", took, grace)
	}
	c, err := api.NewClient("http://"+standbyAddr, "")
	if err != nil {
		t.Fatal(err)
	}
	started := pollEvents(t, c, api.EventQuery{Type: "daemon.started"}, "daemon.started of the takeover",
		func(es []api.Event) bool { return len(es) == 2 && es[1].Reason == "takeover" })[1]
	pollEvents(t, c, api.EventQuery{Type: "lease.heartbeat", Job: "j1", After: started.Seq}, "heartbeat of the lease after the takeover",
		func(es []api.Event) bool { return len(es) > 0 && es[0].Lease == running.Lease && es[0].Worker == "w1" })

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	reported := pollEvents(t, c, api.EventQuery{Type: "lease.reported", Job: "j1"}, "report of j1",
		func(es []api.Event) bool { return len(es) > 0 })
	if len(reported) != 1 || reported[0].Lease != running.Lease || reported[0].Outcome != "succeeded" {
		t.Fatalf("reports of j1: %+v; want one, of lease %d, succeeded", reported, running.Lease)
	}
	if j := job(t, c, "j1"); j.State != "reported" || j.Outcome != "succeeded" || j.Leases != 1 {
		t.Fatalf("j1: %s %s after %d leases, want reported succeeded after 1", j.State, j.Outcome, j.Leases)
	}
	for _, typ := range history(t, c, "j1") {
		if typ == "lease.expired" || typ == "lease.lost" {
			t.Fatalf("j1's lease %s across the takeover: %v", typ, history(t, c, "j1"))
		}
	}
}
