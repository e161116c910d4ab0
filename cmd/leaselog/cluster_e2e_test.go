package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/natstest"
)

// jetStreamGrace and jetStreamTiming are jetStreamText's grace and its
// lines (the leadership's TTL 1 s): one NATS server, no stream election.
const (
	jetStreamGrace  = 2 * time.Second
	jetStreamTiming = "grace_seconds = 2\ntoleration_seconds = 6\n"
)

// jetStreamText is the configuration of a daemon of the e2e tests on
// engine = "jetstream": renew 0.4 s, grace 2 s, no local worker, open.
func jetStreamText(natsURL string) string {
	return fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
[store]
engine = "jetstream"
servers = [%q]
replicas = 1
[plugins.executor]
renew_seconds = 0.4
%slocal_capacity = 0
[log]
level = "debug"
`, natsURL, jetStreamTiming)
}

// startStandby starts `leaselog serve` with text in dir and returns once it
// says it waits as a standby.
func startStandby(t *testing.T, name, dir, text string) *proc {
	t.Helper()
	cfg := filepath.Join(dir, "leaselog.toml")
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, name, "serve", "--config", cfg, "--data", filepath.Join(dir, "data"))
	waitLine(t, p, "jetstream: standby: another daemon leads the stream")
	return p
}

// waitListening waits until p logs that it listens, and returns the address.
func waitListening(t *testing.T, p *proc) string {
	t.Helper()
	return waitAddr(t, p, "listening")
}

// waitAddr waits until p logs msg, and returns the line's address.
func waitAddr(t *testing.T, p *proc, msg string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second) // a takeover at the cluster's grace takes 17 s
	for {
		for _, line := range strings.Split(p.output(), "\n") {
			var l struct{ Message, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Message == msg {
				return l.Addr
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited: %v", p.name, p.err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q", p.name, msg)
		}
	}
}

// TestJetStreamTakeoverAfterSIGKILL: the active daemon is killed with
// SIGKILL; the standby takes over within grace, the running lease still
// heartbeats (no lease expired because of the takeover), and the killed
// daemon, started again, waits as a standby instead of appending. One NATS
// server (R1); TestJetStreamClusterTakeoverAfterSIGKILL runs it on three.
func TestJetStreamTakeoverAfterSIGKILL(t *testing.T) {
	ns := runNATS(t)
	takeoverAfterSIGKILL(t, jetStreamText(ns.ClientURL()), jetStreamGrace, nil)
}

// takeoverAfterSIGKILL is the scenario of TestJetStreamTakeoverAfterSIGKILL
// on daemons configured with text, of grace grace; with nodes (the NATS
// cluster of text), the node leading the stream is shut down with the SIGKILL.
func takeoverAfterSIGKILL(t *testing.T, text string, grace time.Duration, nodes []*server.Server) {
	ctx := context.Background()
	dirA := t.TempDir()
	a := startServeConfig(t, dirA, text)
	submit(t, a.c, "j1", "run", "true")
	grants, err := a.c.Acquire(ctx, "w1", 1, 0)
	if err != nil || len(grants) != 1 {
		t.Fatalf("acquire: %v %v", grants, err)
	}
	lease := grants[0].Lease
	if _, err := a.c.Start(ctx, "w1", lease); err != nil {
		t.Fatal(err)
	}

	b := startStandby(t, "standby", t.TempDir(), text)
	// The standby tells a health check, and any client, it is not the one.
	standbyAddr := waitAddr(t, b, "standby: answering 503 until this daemon leads")
	res, err := http.Get("http://" + standbyAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var body api.ErrorBody
	_ = json.NewDecoder(res.Body).Decode(&body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || body.Error == nil || body.Error.Code != api.CodeUnavailable ||
		!strings.Contains(body.Error.Message, "the active daemon is at 127.0.0.1:0") {
		t.Fatalf("the standby's /healthz: %d %+v, want 503 unavailable naming the active daemon", res.StatusCode, body.Error)
	}
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
	addr := waitListening(t, b)
	took := time.Since(killed)
	t.Logf("the standby listens %v after the SIGKILL of the active daemon (grace %v)", took.Round(time.Millisecond), grace)
	if took > grace {
		t.Errorf("takeover took %v, more than grace (%v)", took, grace)
	}

	c, err := api.NewClient("http://"+addr, "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Heartbeat(ctx, "w1", []uint64{lease})
	if err != nil || len(r.Leases) != 1 || r.Leases[0].Directive != api.DirectiveContinue {
		t.Fatalf("heartbeat of lease %d after the takeover: %+v, %v", lease, r, err)
	}
	evs, err := c.Events(ctx, api.EventQuery{Type: "daemon.started"})
	if err != nil || len(evs.Events) != 2 || evs.Events[1].Reason != "takeover" {
		t.Fatalf("daemon.started events: %+v, %v; want the start, then the takeover", evs, err)
	}
	expired, err := c.Events(ctx, api.EventQuery{Type: "lease.expired"})
	if err != nil || len(expired.Events) != 0 {
		t.Fatalf("expired leases after the takeover: %+v, %v", expired, err)
	}

	// The killed daemon comes back on its own data (with nodes, on the two
	// left): it waits as a standby.
	startStandby(t, "restarted", dirA, text)
}
