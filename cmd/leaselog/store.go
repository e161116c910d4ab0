package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/buildinfo"
	"github.com/leaselog/leaselog/jetstream"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/timing"
)

// The store engines of [store] engine: "pebble" (the default: the log in
// store.dir) and "jetstream" (the log on a NATS JetStream stream, store.dir
// keeping its cache in cache/; docs/cluster.md).
const (
	enginePebble    = "pebble"
	engineJetStream = "jetstream"
)

// defaultStream and defaultReplicas are the stream of engine = "jetstream"
// when the file names none: three replicas, since one copy of the log on a
// NATS server is no safer than the Pebble default.
const (
	defaultStream   = "LEASELOG"
	defaultReplicas = 3
)

// streamElection is how long a replicated stream can be without a leader
// once its leader's node dies: NATS's Raft lets a follower campaign only
// after 4 to 9 s without the leader's heartbeat (nats-server's election
// timeout, fixed in the server). A standby whose active daemon died with the
// stream's leader appends nothing before a new leader is elected, however
// short the leadership key's TTL. takeoverWork is what a takeover does after
// it (the campaign's reads, the catch-up, the rebuild), with room to spare.
const (
	streamElection = 9 * time.Second
	takeoverWork   = time.Second
)

// minReplicatedGrace is the least grace a replicated stream can honour: a
// takeover takes the key's TTL (grace/2), a standby's poll (TTL/4), the
// stream's election and the takeover's work, so grace×3/8 must cover the
// last two.
const minReplicatedGrace = (streamElection + takeoverWork) * 8 / 3

// checkEngine checks the keys of [store] that choose the engine, and that
// grace is one the engine can honour; the error names the key at fault.
func (c StoreConfig) checkEngine(grace time.Duration) error {
	switch c.Engine {
	case "", enginePebble:
		if len(c.Servers) > 0 || c.Stream != "" || c.Replicas != 0 {
			return errors.New(`config: store.servers, store.stream and store.replicas are for engine = "jetstream"`)
		}
		return nil
	case engineJetStream:
	default:
		return fmt.Errorf("config: store.engine: must be pebble or jetstream, is %q", c.Engine)
	}
	if len(c.Servers) == 0 {
		return errors.New(`config: store.servers: engine = "jetstream" needs the NATS servers, e.g. ["nats://127.0.0.1:4222"]`)
	}
	for _, s := range c.Servers {
		if strings.TrimSpace(s) == "" || strings.Contains(s, ",") {
			return fmt.Errorf("config: store.servers: %q is not one NATS URL", s)
		}
	}
	if c.Stream != "" && strings.ContainsAny(c.Stream, ".*> \t\r\n/\\") {
		return fmt.Errorf("config: store.stream: %q: no spaces, dots, slashes, * or >", c.Stream)
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("config: store.replicas: must be 1 to 5, is %d", c.Replicas)
	}
	if (c.Replicas == 0 || c.Replicas > 1) && grace < minReplicatedGrace {
		return fmt.Errorf("config: plugins.executor.grace_seconds: a replicated stream (store.replicas = %d) cannot be taken over within grace when its leader's node dies with the active daemon: NATS elects a new stream leader up to %v later, after the leadership key's TTL (grace/2) and a standby's poll; must be at least %.1f, is %v",
			c.replicas(), streamElection, minReplicatedGrace.Seconds(), grace.Seconds())
	}
	return nil
}

// replicas is the stream's replicas, the default when the file names none.
func (c StoreConfig) replicas() int {
	if c.Replicas == 0 {
		return defaultReplicas
	}
	return c.Replicas
}

// store is the log the daemon opened, with what its engine adds: for
// jetstream, the leadership among the daemons on one stream.
type store struct {
	log    *eventlog.Log
	close  func() error // closes the log (and the engine's connection)
	js     *jetstream.Store
	stream string // engine jetstream: the stream's name
}

// openStore opens the log of the configured engine, with opts. A jetstream
// daemon campaigns for the leadership (campaign) with a TTL of half the
// grace: a standby takes over well within grace of the active daemon's death.
func openStore(ctx context.Context, c StoreConfig, t timing.Config, id string, opts eventlog.Options) (*store, error) {
	if c.Engine != engineJetStream {
		log, err := eventlog.Open(c.Dir, opts)
		if err != nil {
			return nil, err
		}
		return &store{log: log, close: log.Close}, nil
	}
	stream, replicas := c.Stream, c.replicas()
	if stream == "" {
		stream = defaultStream
	}
	s, err := jetstream.Open(ctx, jetstream.Options{
		Servers: c.Servers, Stream: stream, Replicas: replicas,
		Dir: filepath.Join(c.Dir, "cache"), Log: opts, Logger: opts.Logger,
		Leader: &jetstream.Leader{ID: id, TTL: t.Grace / 2},
	})
	if err != nil {
		return nil, err
	}
	return &store{log: s.Log(), close: s.Close, js: s, stream: stream}, nil
}

// newerStore explains err, an open of the store in dir, when the store is
// of a newer leaselog: which build this is, and that the store was left as
// it was (eventlog checks before anything is written).
func newerStore(dir string, err error) error {
	if !errors.Is(err, eventlog.ErrNewerFormat) {
		return err
	}
	return fmt.Errorf("the store in %s was written by a newer leaselog than this one (leaselog %s, which reads store formats up to %d) "+
		"and was left as it was: run a leaselog that reads it: %w", dir, buildinfo.Get().Version, eventlog.CurrentFormat, err)
}

// backup is how the daemon answers POST /v1/admin/backup (server.Options.Backup):
// nil for the Pebble engine, whose store the service copies. A jetstream
// daemon refuses: its log is the stream, which NATS backs up, and its store
// a cache that a restored stream rebuilds (docs/cluster.md §5). A copy of
// the cache would hold the log as this daemon knows it, but restored as a
// cache against another stream it is deleted and rebuilt, and as a Pebble
// store it is no longer the cluster's: not what a backup of the cluster is.
func (s *store) backup() func(string) (lease.BackupInfo, error) {
	if s.js == nil {
		return nil
	}
	return func(string) (lease.BackupInfo, error) {
		return lease.BackupInfo{}, fmt.Errorf("%w: its log is the NATS JetStream stream %s (engine jetstream) and its store a cache of it: "+
			"back the stream up with NATS (`nats stream backup %s DIR`, restored with `nats stream restore DIR`); the daemons rebuild their caches from it",
			lease.ErrBackupElsewhere, s.stream, s.stream)
	}
}

// campaign waits, as a standby that keeps its cache current, until this
// daemon leads the stream, and returns the reason of the daemon.started it
// is to record: TakeoverReason if it took over from another. The Pebble
// engine returns at once.
//
// While it waits, a daemon listening on TCP answers every request on its
// address with 503 unavailable naming the active daemon (the address in the
// leadership key), so that a load balancer's health check (/healthz) tells
// the active daemon from its standbys, and a client is told where to go.
func (s *store) campaign(ctx context.Context, logger zerolog.Logger, listen string) (string, error) {
	if s.js == nil {
		return "", nil
	}
	logger.Info().Msg("campaigning for the leadership of the stream; a standby until then")
	if network, _, _ := splitListen(listen); network == "tcp" {
		stop, err := s.answerAsStandby(listen, logger)
		if err != nil {
			return "", err
		}
		defer stop()
	}
	if err := s.js.Campaign(ctx); err != nil {
		return "", err
	}
	if s.js.TookOver() {
		return jetstream.TakeoverReason, nil
	}
	return "", nil
}

// lost returns a channel closed when the daemon loses the leadership (nil,
// never closed, for the Pebble engine).
func (s *store) lost() <-chan struct{} {
	if s.js == nil {
		return nil
	}
	return s.js.Lost()
}

// errDeposed stops a daemon that lost the leadership of its stream.
var errDeposed = fmt.Errorf("leadership of the stream lost (another daemon leads it): %w", jetstream.ErrDeposed)

// answerAsStandby listens on listen and answers every request with 503
// unavailable, naming the active daemon, until stop (which closes the
// listener, for the daemon to listen there itself).
func (s *store) answerAsStandby(listen string, logger zerolog.Logger) (stop func(), err error) {
	ln, err := listenOn(listen)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		active, err := s.js.Active(r.Context())
		msg := "standby: this daemon waits to take over the stream; the active daemon is at " + active
		if err != nil || active == "" {
			msg = "standby: this daemon waits to take over the stream; no daemon leads it now"
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		// For a client given a list of servers (api/servers.go): this
		// daemon processed nothing, and where the active one listens.
		w.Header().Set(api.HeaderRole, api.RoleStandby)
		if err == nil && active != "" {
			w.Header().Set(api.HeaderActive, "http://"+active)
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: &api.Error{Code: api.CodeUnavailable, Message: msg}})
	})}
	go func() { _ = srv.Serve(ln) }()
	logger.Info().Str("addr", ln.Addr().String()).Msg("standby: answering 503 until this daemon leads")
	return func() { _ = srv.Close() }, nil
}
