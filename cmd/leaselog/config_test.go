package main

import (
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/timing"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig(`
[server]
listen = "unix:///tmp/leaselog.sock"
[store]
dir = "/var/lib/leaselog"
[plugins.executor]
renew_seconds = 0.5
grace_seconds = 3
toleration_seconds = 10
local_capacity = 0
[auth]
admin = ["admin-token-0123456789"]
[auth.workers]
w1 = "worker-token-0123456789"
`)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	l := c.Lease()
	if l.Renew != 500*time.Millisecond || l.Grace != 3*time.Second || l.Toleration != 10*time.Second {
		t.Errorf("timing %+v", l)
	}
	if c.Capacity() != 0 || c.Workdir() != "/var/lib/leaselog/work" || c.Auth.Workers["w1"] == "" {
		t.Errorf("config %+v", c)
	}
	if d := DefaultConfig(); d.Validate() != nil || d.Lease().Toleration != 300*time.Second || d.Retention() != 7*24*time.Hour ||
		d.StopQueue() != lease.CancelQueued || d.Plugins.Executor.MaxRequeues != 0 || d.HeartbeatRetention() != 24*time.Hour {
		t.Errorf("default config %+v: %v", d, d.Validate())
	}
	// A stop that keeps the queue, and a default cap on requeues.
	c, err = ParseConfig("[server]\ncancel_queued_on_stop = false\n[plugins.executor]\nmax_requeues = 3")
	if err != nil || c.Validate() != nil || c.StopQueue() != lease.KeepQueued || c.Plugins.Executor.MaxRequeues != 3 {
		t.Errorf("config %+v: %v", c, err)
	}
	// The bounds of a job's own timing: a day and a second by default.
	if b := DefaultConfig().Bounds(); b != timing.DefaultBounds() {
		t.Errorf("default bounds %+v", b)
	}
	c, err = ParseConfig("[plugins.executor]\nmin_renew_seconds = 0.5\nmax_toleration_seconds = 3600")
	if b := c.Bounds(); err != nil || c.Validate() != nil || b.MinRenew != 500*time.Millisecond || b.MaxToleration != time.Hour {
		t.Errorf("bounds %+v: %v", b, err)
	}
}

// TestConfigErrorsNameTheKey: every refused configuration says which key.
func TestConfigErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"[plugins.executor]\nrenew_seconds = 0", "plugins.executor.renew_seconds"},
		{"[plugins.executor]\nrenew_seconds = 30", "plugins.executor.grace_seconds"},
		{"[plugins.executor]\ngrace_seconds = 400", "plugins.executor.toleration_seconds"},
		{"[plugins.executor]\nlocal_capacity = -1", "plugins.executor.local_capacity"},
		{"[plugins.executor]\nrenew_secs = 5", "unknown key plugins.executor.renew_secs"},
		{"[sever]\nlisten = \"x\"", "unknown key sever"},
		{"[server]\nlisten = \"0.0.0.0:7420\"", "server.listen: 0.0.0.0:7420 is not a loopback address"},
		{"[server]\nlisten = \"nonsense\"", "server.listen"},
		{"[log]\nformat = \"xml\"", "log.format"},
		{"[auth]\nadmin = [\"short\"]", "auth.admin[0]"},
		{"[auth]\n[auth.workers]\n\"bad/id\" = \"worker-token-0123456789\"", "auth.workers.bad/id"},
		{"[auth]\nadmin = [\"same-token-0123456789\"]\nauditor = [\"same-token-0123456789\"]", "auth.auditor[0]"},
		{"[store]\ndir = \"\"", "store.dir"},
		{"[plugins.executor]\nmax_requeues = -1", "plugins.executor.max_requeues: must be 0 (no cap) to 1000000, is -1"},
		{"[plugins.executor]\nmax_requeues = 1000001", "plugins.executor.max_requeues"},
		{"[plugins.executor]\nmax_requeues = 1.5", "max_requeues"},
		{"[server]\ncancel_queued_on_stop = \"no\"", "cancel_queued_on_stop"},
		{"[plugins.executor]\nrenew_seconds = \"ten\"", "renew_seconds"},
		{"[plugins.executor]\nrenew_seconds = 1e300", "plugins.executor.renew_seconds: must be a number of seconds up to"},
		{"[plugins.executor]\ntoleration_seconds = inf", "plugins.executor.toleration_seconds: must be a number of seconds up to"},
		{"[plugins.executor]\ngrace_seconds = nan", "plugins.executor.grace_seconds: must be a number of seconds up to"},
		{"[store]\nsnapshot_seconds = 1e20", "store.snapshot_seconds: must be a number of seconds up to"},
		{"[plugins.executor]\nretention_seconds = -1", "plugins.executor.retention_seconds: must be 0"},
		{"[store]\nheartbeat_retention_seconds = -1", "store.heartbeat_retention_seconds: must be 0 (keep every heartbeat) or more, is -1"},
		{"[store]\nheartbeat_retention_seconds = 1e20", "store.heartbeat_retention_seconds: must be a number of seconds up to"},
		{"[store]\nheartbeat_retention_seconds = nan", "store.heartbeat_retention_seconds: must be a number of seconds up to"},
		{"[store]\nheartbeat_retention = 60", "unknown key store.heartbeat_retention"},
		{"[plugins.executor]\nretention_seconds = 300", "plugins.executor.retention_seconds: must be 0 (keep every run directory) or more than toleration_seconds (300)"},
		{"[plugins.executor]\nretention_seconds = 1e20", "plugins.executor.retention_seconds: must be a number of seconds up to"},
		{"[plugins.executor]\nlocal_kinds = [\"gpu\"]", `plugins.executor.local_kinds: "gpu": want run or evaluation`},
		{"[plugins.executor]\nlocal_labels = {\"a b\" = \"x\"}", `plugins.executor.local_labels: event: bad label: key "a b"`},
		{"[plugins.executor]\nmin_renew_seconds = -1", "plugins.executor.min_renew_seconds: must be 0 (no minimum) or more"},
		{"[plugins.executor]\nmax_toleration_seconds = -1", "plugins.executor.max_toleration_seconds: must be 0 (no maximum) or more"},
		{"[plugins.executor]\nmin_renew_seconds = 5\nmax_toleration_seconds = 10", "plugins.executor.max_toleration_seconds: must exceed 2 × min_renew_seconds"},
		{"[plugins.executor]\nmax_toleration_seconds = 1e20", "plugins.executor.max_toleration_seconds: must be a number of seconds up to"},
		{"[plugins.executor]\nmin_renew_seconds = nan", "plugins.executor.min_renew_seconds: must be a number of seconds up to"},
	} {
		c, err := ParseConfig(tc.text)
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming %q", tc.text, err, tc.want)
		}
	}
	// With tokens, any address may be used.
	c, err := ParseConfig("[server]\nlisten = \"0.0.0.0:7420\"\n[auth]\nadmin = [\"admin-token-0123456789\"]")
	if err != nil || c.Validate() != nil {
		t.Errorf("authenticated config on 0.0.0.0: %v %v", err, c.Validate())
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add("[plugins.executor]\nrenew_seconds = 1.5\ngrace_seconds = 5\ntoleration_seconds = 20")
	f.Add("[auth]\nadmin = [\"admin-token-0123456789\"]")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseConfig(text)
		if err != nil {
			return
		}
		if c.Validate() == nil && c.Lease().Validate() != nil {
			t.Fatalf("Validate accepted timing the lease service refuses: %+v", c.Lease())
		}
	})
}
