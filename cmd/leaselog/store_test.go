package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
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
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	cfg := DefaultConfig()
	cfg.Store.Dir = t.TempDir()
	cfg.Store.Engine, cfg.Store.Servers, cfg.Store.Replicas = engineJetStream, []string{ns.ClientURL()}, 1
	cfg.Server.Listen = "127.0.0.1:0"
	zero := 0
	cfg.Plugins.Executor.LocalCapacity = &zero
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := startDaemon(ctx, cfg, zerolog.Nop(), nil)
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
	d, err = startDaemon(ctx, cfg, zerolog.Nop(), nil)
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
