package main

import (
	"errors"
	"fmt"
	"math"
	"net"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/server"
	"github.com/leaselog/leaselog/timing"
	"github.com/leaselog/leaselog/worker/local"
)

// Config is the daemon's configuration file (TOML). Every key has a default;
// an empty file is a valid configuration.
//
//	[server]
//	listen = "127.0.0.1:7420"        # or "unix:///run/leaselog.sock"
//	advertise = "host1:7420"         # jetstream: where others reach it; default listen, or hostname:port (advertise.go)
//	open = false                     # no [auth] and a local worker: true serves with no token at all
//	max_connections = 0              # 0: from the file-descriptor limit, leaving the store its files
//	cancel_queued_on_stop = true     # false: a graceful stop keeps the queue for the next start (serve --keep-queued)
//
//	[store]
//	dir = "./leaselog-data"
//	snapshot_every = 100000          # events between snapshots (or 4 a job or lease held, if more); 0: never by count
//	snapshot_seconds = 60            # time between snapshots while events come; 0: never by time
//	heartbeat_retention_seconds = 86400 # heartbeats of jobs ended longer ago are compacted into summaries; 0: kept
//	engine = "pebble"                # or "jetstream": the log on a NATS JetStream stream (docs/cluster.md)
//	servers = ["nats://n1:4222"]     # jetstream: the NATS servers
//	stream = "LEASELOG"              # jetstream: the stream; store.dir keeps its cache
//	replicas = 3                     # jetstream: the stream's replicas when it is created
//
//	[plugins.executor]
//	renew_seconds = 10               # decimals allowed
//	grace_seconds = 50
//	toleration_seconds = 300
//	local_capacity = 4               # default: number of CPUs; 0: no local worker
//	workdir = "./leaselog-data/work" # where the local worker runs jobs
//	retention_seconds = 604800       # run directories of ended jobs are removed after this; 0: kept
//	max_requeues = 0                 # an evaluation lost once more than this many requeues fails; 0: no cap
//	local_kinds = ["evaluation"]     # the kinds of job the local worker takes; default: every kind
//	local_labels = {gpu = "a100"}    # the labels it offers: it takes only jobs whose labels it offers
//	min_renew_seconds = 1            # the bounds of a job's own timing (submit's renew_seconds…);
//	max_toleration_seconds = 86400   # 0: no bound
//
//	[auth]                           # absent: loopback or a unix socket only, and open unless
//	                                 # there is a local worker: then an admin token in <dir>/token
//	admin = ["TOKEN"]
//	auditor = ["TOKEN"]
//	[auth.workers]
//	w1 = "TOKEN"
//
//	[log]
//	format = "json"                  # or "console"
//	level = "info"
type Config struct {
	Server  ServerConfig  `toml:"server"`
	Store   StoreConfig   `toml:"store"`
	Plugins PluginsConfig `toml:"plugins"`
	Auth    *AuthConfig   `toml:"auth"`
	Log     LogConfig     `toml:"log"`
}

// ServerConfig is [server].
type ServerConfig struct {
	Listen string `toml:"listen"`
	// Advertise is where other machines reach this daemon (advertise.go):
	// the address in the stream's leadership key that a standby names.
	Advertise string `toml:"advertise"`
	// Open serves the API with no token even with a local worker, whose jobs
	// run as the daemon's user: every local user can then run commands as
	// that user. Without it, a daemon with a local worker and no [auth]
	// generates an admin token (see GeneratesToken).
	Open bool `toml:"open"`
	// MaxConnections caps the API's open connections; 0: half of what the
	// file-descriptor limit leaves once the store's files are counted
	// (server.DefaultMaxConns).
	MaxConnections int `toml:"max_connections"`
	// CancelQueuedOnStop: a graceful stop cancels the jobs still queued
	// ("daemon stopped"), the Leases page's rule and the default; false
	// keeps them queued for the next start, for a deploy or an upgrade.
	CancelQueuedOnStop bool `toml:"cancel_queued_on_stop"`
}

// StoreConfig is [store].
type StoreConfig struct {
	Dir             string  `toml:"dir"`
	SnapshotEvery   int     `toml:"snapshot_every"`
	SnapshotSeconds float64 `toml:"snapshot_seconds"`
	// HeartbeatRetentionSeconds is how long after its job ended a lease's
	// heartbeats are kept whole before the compactor folds them into
	// summaries (lease.Options.HeartbeatRetention); 0 keeps them all.
	HeartbeatRetentionSeconds float64 `toml:"heartbeat_retention_seconds"`
	// Engine is "pebble" (or empty) or "jetstream" (store.go): then Servers,
	// Stream and Replicas say where the log is.
	Engine   string   `toml:"engine"`
	Servers  []string `toml:"servers"`
	Stream   string   `toml:"stream"`
	Replicas int      `toml:"replicas"`
}

// PluginsConfig is [plugins].
type PluginsConfig struct {
	Executor ExecutorConfig `toml:"executor"`
}

// ExecutorConfig is [plugins.executor].
type ExecutorConfig struct {
	RenewSeconds      float64 `toml:"renew_seconds"`
	GraceSeconds      float64 `toml:"grace_seconds"`
	TolerationSeconds float64 `toml:"toleration_seconds"`
	LocalCapacity     *int    `toml:"local_capacity"`
	Workdir           string  `toml:"workdir"`
	// RetentionSeconds is how long the local worker keeps the run
	// directory of an ended job (worktrees included; the refs they brought
	// back stay); 0 keeps them all.
	RetentionSeconds float64 `toml:"retention_seconds"`
	// MaxRequeues caps the requeues after losses of an evaluation
	// submitted without a cap of its own (lease.Options.MaxRequeues); 0:
	// no cap.
	MaxRequeues int `toml:"max_requeues"`
	// LocalKinds and LocalLabels are the local worker's offer: the kinds
	// of job it takes (none: every kind) and the labels it offers.
	LocalKinds  []string          `toml:"local_kinds"`
	LocalLabels map[string]string `toml:"local_labels"`
	// MinRenewSeconds and MaxTolerationSeconds bound the timing a job may
	// ask for of its own (lease.Options.Bounds); 0: no bound.
	MinRenewSeconds      float64 `toml:"min_renew_seconds"`
	MaxTolerationSeconds float64 `toml:"max_toleration_seconds"`
}

// AuthConfig is [auth].
type AuthConfig struct {
	Admin   []string          `toml:"admin"`
	Auditor []string          `toml:"auditor"`
	Workers map[string]string `toml:"workers"`
}

// LogConfig is [log].
type LogConfig struct {
	Format string `toml:"format"`
	Level  string `toml:"level"`
}

// DefaultConfig is the configuration of an empty file.
func DefaultConfig() Config {
	def, bounds := timing.Default(), timing.DefaultBounds()
	capacity := runtime.NumCPU()
	return Config{
		Server: ServerConfig{Listen: "127.0.0.1:7420", CancelQueuedOnStop: true},
		Store: StoreConfig{Dir: "./leaselog-data", SnapshotEvery: lease.DefaultSnapshotEvery, SnapshotSeconds: 60,
			HeartbeatRetentionSeconds: lease.DefaultHeartbeatRetention.Seconds()},
		Plugins: PluginsConfig{Executor: ExecutorConfig{
			RenewSeconds: def.Renew.Seconds(), GraceSeconds: def.Grace.Seconds(), TolerationSeconds: def.Toleration.Seconds(),
			LocalCapacity: &capacity, RetentionSeconds: local.DefaultRetention.Seconds(),
			MinRenewSeconds: bounds.MinRenew.Seconds(), MaxTolerationSeconds: bounds.MaxToleration.Seconds(),
		}},
		Log: LogConfig{Format: "json", Level: "info"},
	}
}

// ParseConfig reads a TOML document over the defaults. A key leaselog does
// not know is an error, naming it: a misspelt key must not be silently
// ignored.
func ParseConfig(text string) (Config, error) {
	c := DefaultConfig()
	md, err := toml.Decode(text, &c)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		keys := make([]string, len(undecoded))
		for i, k := range undecoded {
			keys[i] = k.String()
		}
		sort.Strings(keys)
		return Config{}, fmt.Errorf("config: unknown key %s", strings.Join(keys, ", "))
	}
	return c, nil
}

// Lease returns the lease timing of [plugins.executor].
func (c Config) Lease() timing.Config {
	e := c.Plugins.Executor
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	return timing.Config{Renew: sec(e.RenewSeconds), Grace: sec(e.GraceSeconds), Toleration: sec(e.TolerationSeconds)}
}

// Bounds returns the bounds of a job's own timing of [plugins.executor].
func (c Config) Bounds() timing.Bounds {
	e := c.Plugins.Executor
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	return timing.Bounds{MinRenew: sec(e.MinRenewSeconds), MaxToleration: sec(e.MaxTolerationSeconds)}
}

// Capacity is the local worker's capacity.
func (c Config) Capacity() int {
	if c.Plugins.Executor.LocalCapacity == nil {
		return runtime.NumCPU()
	}
	return *c.Plugins.Executor.LocalCapacity
}

// Retention is how long the local worker keeps the run directory of an
// ended job; 0 keeps them all.
func (c Config) Retention() time.Duration {
	return time.Duration(c.Plugins.Executor.RetentionSeconds * float64(time.Second))
}

// StopQueue is what a graceful stop does with the jobs still queued
// (server.cancel_queued_on_stop).
func (c Config) StopQueue() lease.QueuePolicy {
	if c.Server.CancelQueuedOnStop {
		return lease.CancelQueued
	}
	return lease.KeepQueued
}

// HeartbeatRetention is how long after its job ended a lease's heartbeats
// are kept before they are compacted; 0 keeps them.
func (c Config) HeartbeatRetention() time.Duration {
	return time.Duration(c.Store.HeartbeatRetentionSeconds * float64(time.Second))
}

// Workdir is where the local worker runs its jobs.
func (c Config) Workdir() string {
	if c.Plugins.Executor.Workdir != "" {
		return c.Plugins.Executor.Workdir
	}
	return strings.TrimRight(c.Store.Dir, "/") + "/work"
}

// maxSeconds bounds every duration of the file: a year. A larger number is a
// mistake, and one past time.Duration's range (292 years) would wrap around.
const maxSeconds = 365 * 24 * 3600

// Validate checks the configuration; the error names the key at fault.
func (c Config) Validate() error {
	e := c.Plugins.Executor
	for _, d := range []struct {
		key string
		v   float64
	}{
		{"plugins.executor.renew_seconds", e.RenewSeconds},
		{"plugins.executor.grace_seconds", e.GraceSeconds},
		{"plugins.executor.toleration_seconds", e.TolerationSeconds},
		{"store.snapshot_seconds", c.Store.SnapshotSeconds},
		{"store.heartbeat_retention_seconds", c.Store.HeartbeatRetentionSeconds},
		{"plugins.executor.retention_seconds", e.RetentionSeconds},
		{"plugins.executor.min_renew_seconds", e.MinRenewSeconds},
		{"plugins.executor.max_toleration_seconds", e.MaxTolerationSeconds},
	} {
		if math.IsNaN(d.v) || math.Abs(d.v) > maxSeconds {
			return fmt.Errorf("config: %s: must be a number of seconds up to %d (a year), is %v", d.key, maxSeconds, d.v)
		}
	}
	for _, v := range []interface{ Validate() error }{c.Lease(), c.Bounds()} {
		if err := v.Validate(); err != nil {
			var ce *timing.ConfigError
			if errors.As(err, &ce) {
				return fmt.Errorf("config: plugins.executor.%s: %s", ce.Key, ce.Message)
			}
			return err
		}
	}
	switch {
	case c.Capacity() < 0:
		return fmt.Errorf("config: plugins.executor.local_capacity: must be 0 or more, is %d", c.Capacity())
	case e.RetentionSeconds < 0:
		return fmt.Errorf("config: plugins.executor.retention_seconds: must be 0 (keep every run directory) or more, is %v", e.RetentionSeconds)
	case e.RetentionSeconds != 0 && e.RetentionSeconds <= e.TolerationSeconds:
		// A lease outlives its job's end by toleration at most: a shorter
		// retention could remove a run a restarted worker re-attaches to.
		return fmt.Errorf("config: plugins.executor.retention_seconds: must be 0 (keep every run directory) or more than toleration_seconds (%v), is %v", e.TolerationSeconds, e.RetentionSeconds)
	case badKinds(e.LocalKinds) != "":
		return fmt.Errorf("config: plugins.executor.local_kinds: %q: want run or evaluation", badKinds(e.LocalKinds))
	case badLabels(e.LocalLabels) != nil:
		return fmt.Errorf("config: plugins.executor.local_labels: %w", badLabels(e.LocalLabels))
	case e.MaxRequeues < 0 || e.MaxRequeues > lease.MaxRequeuesLimit:
		return fmt.Errorf("config: plugins.executor.max_requeues: must be 0 (no cap) to %d, is %d", lease.MaxRequeuesLimit, e.MaxRequeues)
	case c.Server.MaxConnections < 0:
		return fmt.Errorf("config: server.max_connections: must be 0 (from the file-descriptor limit) or more, is %d", c.Server.MaxConnections)
	case c.Store.Dir == "":
		return errors.New("config: store.dir: must not be empty")
	case c.Store.SnapshotEvery < 0:
		return fmt.Errorf("config: store.snapshot_every: must be 0 (never) or more, is %d", c.Store.SnapshotEvery)
	case c.Store.SnapshotSeconds < 0:
		return fmt.Errorf("config: store.snapshot_seconds: must be 0 (never) or more, is %v", c.Store.SnapshotSeconds)
	case c.Store.HeartbeatRetentionSeconds < 0:
		return fmt.Errorf("config: store.heartbeat_retention_seconds: must be 0 (keep every heartbeat) or more, is %v", c.Store.HeartbeatRetentionSeconds)
	case c.Log.Format != "json" && c.Log.Format != "console":
		return fmt.Errorf("config: log.format: must be json or console, is %q", c.Log.Format)
	}
	if err := c.Store.checkEngine(c.Lease().Grace); err != nil {
		return err
	}
	if _, err := parseLevel(c.Log.Level); err != nil {
		return fmt.Errorf("config: log.level: %w", err)
	}
	if _, _, err := splitListen(c.Server.Listen); err != nil {
		return fmt.Errorf("config: server.listen: %w", err)
	}
	if err := c.Server.checkAdvertise(); err != nil {
		return err
	}
	if c.Server.Open && c.Auth != nil {
		return errors.New("config: server.open: an [auth] section is given too; open serves with no token, so keep one of them")
	}
	if a := c.ServerAuth(); a != nil {
		if err := a.Validate(); err != nil {
			return fmt.Errorf("config: %w", err) // it names the key at fault
		}
	} else if network, addr, _ := splitListen(c.Server.Listen); network == "tcp" && !isLoopback(addr) {
		return fmt.Errorf("config: server.listen: %s is not a loopback address, and with no [auth] section the API is open: add [auth] tokens, or listen on 127.0.0.1 or a unix socket", addr)
	}
	return nil
}

// GeneratesToken tells whether the daemon keeps an admin token in its data
// directory: with no [auth], a local worker, and server.open not set. Open
// mode would let any local user run commands as the daemon's user.
func (c Config) GeneratesToken() bool {
	return c.Auth == nil && !c.Server.Open && c.Capacity() > 0
}

// ServerAuth converts [auth] for the server.
func (c Config) ServerAuth() *server.Auth {
	if c.Auth == nil {
		return nil
	}
	return &server.Auth{Admin: c.Auth.Admin, Auditor: c.Auth.Auditor, Workers: c.Auth.Workers}
}

// splitListen parses "host:port" or "unix:///path".
func splitListen(s string) (network, addr string, err error) {
	if path, ok := strings.CutPrefix(s, "unix://"); ok {
		if path == "" {
			return "", "", errors.New("unix:// needs a socket path")
		}
		return "unix", path, nil
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		return "", "", fmt.Errorf("%q is neither host:port nor unix:///path: %v", s, err)
	}
	return "tcp", s, nil
}

func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// badKinds is the first of kinds that is no kind of job, or "".
func badKinds(kinds []string) string {
	for _, k := range kinds {
		if _, err := event.ParseKind(k); err != nil {
			return k
		}
	}
	return ""
}

// badLabels is what is wrong with labels, as the daemon checks an offer's.
func badLabels(labels map[string]string) error {
	_, err := event.MakeLabels(labels)
	return err
}

// LocalOffer is what the local worker takes.
func (c Config) LocalOffer() api.Offer {
	e := c.Plugins.Executor
	return api.Offer{Kinds: e.LocalKinds, Labels: e.LocalLabels}
}
