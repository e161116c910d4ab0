package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/internal/testkit/natstest"
)

// TestStoreEngineConfig: the keys of the engine, accepted and refused, each
// refusal naming its key.
func TestStoreEngineConfig(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"[store]\nengine = \"pebble\"", ""},
		{"[store]\nengine = \"jetstream\"\nservers = [\"nats://127.0.0.1:4222\"]", ""},
		{"[store]\nengine = \"jetstream\"\nservers = [\"nats://a:4222\", \"nats://b:4222\"]\nstream = \"JOBS\"\nreplicas = 3", ""},
		{"[store]\nengine = \"etcd\"", "store.engine"},
		{"[store]\nengine = \"jetstream\"", "store.servers"},
		{"[store]\nengine = \"jetstream\"\nservers = [\"nats://a:4222,nats://b:4222\"]", "store.servers"},
		{"[store]\nengine = \"jetstream\"\nservers = [\"nats://a:4222\"]\nstream = \"a.b\"", "store.stream"},
		{"[store]\nengine = \"jetstream\"\nservers = [\"nats://a:4222\"]\nreplicas = 7", "store.replicas"},
		{"[store]\nservers = [\"nats://a:4222\"]", "store.servers"},
		// A replicated stream (three replicas by default) elects a leader up
		// to 9 s after its leader's node dies: a grace under 26.7 s cannot
		// hold a takeover. One replica has no election to wait for.
		{"[store]\nengine = \"jetstream\"\nservers = [\"nats://a:4222\"]\n[plugins.executor]\nrenew_seconds = 1\ngrace_seconds = 26\ntoleration_seconds = 60", "plugins.executor.grace_seconds: a replicated stream (store.replicas = 3)"},
		{"[store]\nengine = \"jetstream\"\nservers = [\"nats://a:4222\"]\nreplicas = 2\n[plugins.executor]\nrenew_seconds = 1\ngrace_seconds = 10\ntoleration_seconds = 60", "must be at least 26.7, is 10"},
		{"[store]\nengine = \"jetstream\"\nservers = [\"nats://a:4222\"]\n[plugins.executor]\nrenew_seconds = 1\ngrace_seconds = 27\ntoleration_seconds = 60", ""},
		{"[store]\nengine = \"jetstream\"\nservers = [\"nats://a:4222\"]\nreplicas = 1\n[plugins.executor]\nrenew_seconds = 0.4\ngrace_seconds = 2\ntoleration_seconds = 6", ""},
		{"[plugins.executor]\nrenew_seconds = 0.4\ngrace_seconds = 2\ntoleration_seconds = 6", ""},
	} {
		c, err := ParseConfig(tc.text)
		if err == nil {
			err = c.Validate()
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.text, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one naming %s", tc.text, err, tc.want)
		}
	}
}

// TestDaemonOnJetStream: a daemon on engine = "jetstream" serves, and a
// restart with its cache deleted finds every job it acknowledged.
func TestDaemonOnJetStream(t *testing.T) {
	ns := runNATS(t)
	cfg := jetStreamConfig(t, ns)
	ctx := context.Background()
	d, err := startDaemon(ctx, cfg, zerolog.Nop(), startOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.svc.Submit(ctx, "j1", event.KindRun, []byte(`{"cmd":"true"}`)); err != nil {
		t.Fatal(err)
	}
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(cfg.Store.Dir, "cache")); err != nil {
		t.Fatal(err)
	}
	d, err = startDaemon(ctx, cfg, zerolog.Nop(), startOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	j, err := d.svc.Job(ctx, "j1")
	if err != nil {
		t.Fatalf("the job acknowledged before the restart: %v", err)
	}
	// The stop cancelled it (queued jobs are cancelled on a graceful stop):
	// what the first life recorded, rebuilt from the stream.
	if j.State != fsm.Cancelled || j.Reason != "daemon stopped" {
		t.Fatalf("job after the restart: %+v, want cancelled by the stop", j)
	}
}

// jetStreamConfig is a daemon's configuration on engine = "jetstream" on
// ns, with no local worker, on a free port, with a short lease timing (the
// leadership's TTL is half the grace).
func jetStreamConfig(t *testing.T, ns *server.Server) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Store.Dir = t.TempDir()
	cfg.Store.Engine, cfg.Store.Servers, cfg.Store.Replicas = engineJetStream, []string{ns.ClientURL()}, 1
	cfg.Server.Listen = "127.0.0.1:0"
	zero := 0
	cfg.Plugins.Executor.LocalCapacity = &zero
	cfg.Plugins.Executor.RenewSeconds, cfg.Plugins.Executor.GraceSeconds, cfg.Plugins.Executor.TolerationSeconds = 0.2, 1, 3
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestStandbyDaemonTakesOver: a second daemon on the stream waits as a
// standby, without serving, and takes over when the active one stops,
// recording the takeover; a standby stopped while it waits stops.
func TestStandbyDaemonTakesOver(t *testing.T) {
	ns := runNATS(t)
	ctx := context.Background()
	a, err := startDaemon(ctx, jetStreamConfig(t, ns), zerolog.Nop(), startOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.svc.Submit(ctx, "j1", event.KindRun, nil); err != nil {
		t.Fatal(err)
	}
	type started struct {
		d   *daemon
		err error
	}
	standby := make(chan started, 1)
	var logs syncBuffer
	go func() {
		d, err := startDaemon(ctx, jetStreamConfig(t, ns), zerolog.New(&logs), startOptions{})
		standby <- started{d, err}
	}()
	cancelled, cancel := context.WithCancel(ctx)
	third := make(chan error, 1)
	go func() {
		_, err := startDaemon(cancelled, jetStreamConfig(t, ns), zerolog.Nop(), startOptions{})
		third <- err
	}()
	cancel()
	if err := <-third; !errors.Is(err, errStartStopped) {
		t.Fatalf("a standby stopped while it waits: %v, want errStartStopped", err)
	}
	waitFor(t, "the second daemon to log that it waits as a standby", func() bool {
		return strings.Contains(logs.String(), "standby: another daemon leads")
	})
	select {
	case r := <-standby:
		t.Fatalf("a standby started while the active daemon runs: %v", r.err)
	default:
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	var b started
	select {
	case b = <-standby:
	case <-time.After(10 * time.Second):
		t.Fatal("the standby did not take over when the active daemon stopped")
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	defer b.d.stop()
	if _, err := b.d.svc.Job(ctx, "j1"); err != nil {
		t.Fatalf("the job of the daemon taken over from: %v", err)
	}
	e, err := b.d.log.Get(b.d.log.LastSeq())
	if err != nil || e.Type != event.TypeDaemonStarted || e.Reason != "takeover" {
		t.Fatalf("the standby recorded %v (%v), want daemon.started reason=takeover", e.String(), err)
	}
}

// syncBuffer is a bytes.Buffer a daemon's logger writes to while a test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runNATS runs an in-process NATS server with JetStream for the test.
func runNATS(t *testing.T) *server.Server {
	t.Helper()
	return natstest.Run(t)
}

// The local worker's supervisors watch the store's lock on the Pebble
// engine only: on engine jetstream a standby can lead, and expire leases,
// while this daemon is away.
func TestLocalStoreLock(t *testing.T) {
	for _, tc := range []struct{ engine, want string }{
		{"", "/data/LOCK"}, {enginePebble, "/data/LOCK"}, {engineJetStream, ""},
	} {
		if got := localStoreLock(StoreConfig{Engine: tc.engine, Dir: "/data"}); got != tc.want {
			t.Errorf("engine %q: %q, want %q", tc.engine, got, tc.want)
		}
	}
}
