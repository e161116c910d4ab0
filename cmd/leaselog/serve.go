package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/leaselog/leaselog/lease"
)

func (m *Main) serveCommand() *cobra.Command {
	var (
		configPath, dir, listen, advertise, logFormat, logLevel string
		capacity                                                int
		open, keepQueued                                        bool
		retention                                               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve [--config FILE] [--data DIR] [--listen ADDR]",
		Short: "Run the daemon, with its built-in local worker",
		Long: `Run the daemon: the HTTP API executors, workers and auditors talk to, the
sweeper that expires silent workers, and the built-in worker "local", which
runs jobs as processes on this machine (local_capacity at once).

With no [auth] section and a local worker, the API takes an admin token that
the daemon generates into DIR/token (mode 0600, kept across restarts): the
local worker runs any submitted command as this user, and other users of the
host must not. Client commands of this user find that file (see --data of
each). --open serves with no token at all instead. Without a local worker and
without [auth], the API is open, on loopback addresses and unix sockets only.
A unix socket is created 0600.

SIGTERM or SIGINT stops it gracefully: queued jobs are cancelled ("daemon
stopped") — or, with --keep-queued (server.cancel_queued_on_stop = false),
kept queued for the next start —, daemon.stopping is recorded, and jobs in
flight keep running; on the next start the local worker re-attaches to each
of them. During start-up
they stop it too, within seconds even in the middle of a long replay.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The daemon needs no token of its own; its jobs must not find one.
			if err := m.dropTokenEnv(); err != nil {
				return err
			}
			cfg := DefaultConfig()
			if configPath != "" {
				text, err := os.ReadFile(configPath)
				if err != nil {
					return fmt.Errorf("config: %w", err)
				}
				if cfg, err = ParseConfig(string(text)); err != nil {
					return fmt.Errorf("%s: %w", configPath, err)
				}
			}
			// Flags override the file.
			f := cmd.Flags()
			if f.Changed("data") {
				cfg.Store.Dir = dir
			}
			if f.Changed("listen") {
				cfg.Server.Listen = listen
			}
			if f.Changed("advertise") {
				cfg.Server.Advertise = advertise
			}
			if f.Changed("log-format") {
				cfg.Log.Format = logFormat
			}
			if f.Changed("log-level") {
				cfg.Log.Level = logLevel
			}
			if f.Changed("local-capacity") {
				cfg.Plugins.Executor.LocalCapacity = &capacity
			}
			if f.Changed("open") {
				cfg.Server.Open = open
			}
			if f.Changed("keep-queued") {
				cfg.Server.CancelQueuedOnStop = !keepQueued
			}
			if f.Changed("retention") {
				cfg.Plugins.Executor.RetentionSeconds = retention.Seconds()
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			return serve(cmd.Context(), cfg, m.Stderr)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "TOML configuration file")
	cmd.Flags().StringVar(&dir, "data", "", "data directory (store.dir; default ./leaselog-data)")
	cmd.Flags().StringVar(&listen, "listen", "", "listen address, host:port or unix:///path (server.listen; default 127.0.0.1:7420)")
	cmd.Flags().StringVar(&advertise, "advertise", "", "host:port other machines reach this daemon at, named by a standby of engine jetstream (server.advertise; default listen, or the hostname with its port)")
	cmd.Flags().StringVar(&logFormat, "log-format", "", "json or console, coloured on a terminal only (log.format)")
	cmd.Flags().StringVar(&logLevel, "log-level", "", "debug, info, warn or error (log.level)")
	cmd.Flags().IntVar(&capacity, "local-capacity", 0, "jobs the local worker runs at once; 0: no local worker")
	cmd.Flags().DurationVar(&retention, "retention", 0, "keep the local worker's run directories this long after their job ended, then remove them; 0 keeps them (plugins.executor.retention_seconds; default 168h)")
	cmd.Flags().BoolVar(&keepQueued, "keep-queued", false, "a graceful stop keeps the queued jobs for the next start instead of cancelling them, for a deploy or an upgrade (server.cancel_queued_on_stop = false)")
	cmd.Flags().BoolVar(&open, "open", false, "with a local worker and no [auth], serve with no token: every local user may then run commands as this user (server.open)")
	return cmd
}

// startStopWait is how long a signal during start-up waits for the stage
// under way to end before the process exits under it. Replaying a long log
// cannot be interrupted; the store is crash-safe, so exiting then leaves it
// as a kill would, which the next start recovers from.
const startStopWait = 2 * time.Second

// storeErrorGrace is how long a start-up that the store reported a failure
// in may still take before serve gives up on it.
const storeErrorGrace = 3 * time.Second

// serve runs the daemon until ctx is done, then stops it gracefully. ctx
// done during start-up stops it too: at the next stage, or after
// startStopWait.
func serve(ctx context.Context, cfg Config, stderr io.Writer) error {
	logger := newLogger(cfg.Log, stderr)
	type result struct {
		d   *daemon
		err error
	}
	started := make(chan result, 1)
	watch := newStartWatch()
	storeLogger := logger.Hook(watch)
	go func() {
		d, err := startDaemon(ctx, cfg, logger, startOptions{StoreLogger: &storeLogger})
		started <- result{d, err}
	}()
	var r result
	select {
	case r = <-started:
	case msg := <-watch.errs:
		select {
		case r = <-started:
		case <-ctx.Done():
			logger.Warn().Str("store_error", msg).Msg("stopping during a start-up the store failed in; exiting now")
			return nil
		case <-time.After(storeErrorGrace):
			return fmt.Errorf("serve: the store in %s failed during start-up: %s", cfg.Store.Dir, msg)
		}
	case <-ctx.Done():
		logger.Info().Msg("stopping during start-up")
		select {
		case r = <-started:
		case <-time.After(startStopWait):
			logger.Warn().Float64("waited_seconds", startStopWait.Seconds()).
				Msg("start-up did not reach a stage where it can stop; exiting now: the store recovers at the next start as after a kill")
			return nil
		}
	}
	if errors.Is(r.err, errStartStopped) {
		logger.Info().Msg("stopped during start-up")
		return nil
	}
	if r.err != nil {
		return r.err
	}
	d := r.d
	var runErr error
	select {
	case <-ctx.Done():
		if d.queue == lease.KeepQueued {
			d.logger.Info().Msg("stopping: queued jobs kept for the next start; jobs in flight keep running")
		} else {
			d.logger.Info().Msg("stopping: cancelling queued jobs; jobs in flight keep running")
		}
	case runErr = <-d.errs:
		d.logger.Error().Err(runErr).Msg("stopping after a failure")
	}
	return errors.Join(runErr, d.stop())
}
