package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/jetstream"
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

// checkEngine checks the keys of [store] that choose the engine; the error
// names the key at fault.
func (c StoreConfig) checkEngine() error {
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
	return nil
}

// openStore opens the log of the configured engine, with opts, and returns
// it with what closes it (for jetstream, the cache and the connection).
func openStore(ctx context.Context, c StoreConfig, opts eventlog.Options) (*eventlog.Log, func() error, error) {
	if c.Engine != engineJetStream {
		log, err := eventlog.Open(c.Dir, opts)
		if err != nil {
			return nil, nil, err
		}
		return log, log.Close, nil
	}
	stream, replicas := c.Stream, c.Replicas
	if stream == "" {
		stream = defaultStream
	}
	if replicas == 0 {
		replicas = defaultReplicas
	}
	s, err := jetstream.Open(ctx, jetstream.Options{
		Servers: c.Servers, Stream: stream, Replicas: replicas,
		Dir: filepath.Join(c.Dir, "cache"), Log: opts, Logger: opts.Logger,
	})
	if err != nil {
		return nil, nil, err
	}
	return s.Log(), s.Close, nil
}
