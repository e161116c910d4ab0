package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/spf13/cobra"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/hostclock"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/timing"
	"github.com/leaselog/leaselog/worker"
	"github.com/leaselog/leaselog/worker/local"
)

func (m *Main) workerCommand() *cobra.Command {
	var server, id, workdir, logFormat, logLevel, tokenFile, dataDir string
	var retention time.Duration
	var capacity int
	var protocol string
	var session bool
	var offer api.Offer
	var labels []string
	cmd := &cobra.Command{
		Use:   "worker --server URL --id ID [--capacity N] [--workdir DIR] [--kinds K,...] [--label K=V]...",
		Short: "Run a worker on this machine against a remote daemon",
		Long: `Run a worker: take leases from the daemon at --server, run their jobs as
processes here (in git worktrees under --workdir when a job names a repo),
heartbeat every renew_seconds, and report. The worker stops its own jobs when
the daemon has not acknowledged a heartbeat for toleration − 2×renew seconds.
Stopping the worker leaves its jobs running; started again with the same id
and workdir, it re-attaches to them.

Its token is $LEASELOG_TOKEN or the file --token-file (mode 0600); with
neither, for a daemon on this host, the workers' token that a daemon with no
[auth] keeps in DATA/worker-token (--data). Given in the environment, the
worker re-executes itself without it, so that its jobs find it neither in
their environment nor in the worker's. A daemon that refuses the token (401,
403) stops the worker with an error naming both: retrying cannot help.

Before taking leases it asks the daemon for its boot id (retrying until the
daemon answers): on the daemon's host the worker fences on CLOCK_MONOTONIC,
elsewhere on CLOCK_BOOTTIME, which counts this host's sleep.

--server may list an active daemon and its standbys (engine "jetstream"):
--server a:7420,b:7420. A call that no daemon took (nothing listens, a
standby answered 503) goes to the daemon the standby names, else the next;
the worker stays with the one that answered, and heartbeats its leases there
after a takeover. With a list it fences on CLOCK_BOOTTIME.

--protocol session (the default) makes the worker calls — acquire,
heartbeat, start, report — as frames of a worker session (GET /v1/session
upgraded: one connection, no HTTP per call), and plain HTTP calls from the
first refusal of the upgrade on (a daemon from before sessions, a proxy that
does not pass upgrades); --protocol http makes them plain calls.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := lease.CheckID("worker", id); err != nil {
				return fmt.Errorf("worker: --id: %w", err)
			}
			token, err := m.takeToken(tokenFile)
			if err != nil {
				return fmt.Errorf("worker: %w", err)
			}
			if m.Exec != nil { // not when run in-process by a test
				if err := undumpable(); err != nil {
					return fmt.Errorf("worker: %w", err)
				}
			}
			if server, err = resolveServer(server); err != nil {
				return fmt.Errorf("worker: --server: %w", err)
			}
			tokenFrom := "$LEASELOG_TOKEN"
			switch {
			case tokenFile != "":
				tokenFrom = "the token of --token-file " + tokenFile
			case token == "":
				if token, tokenFrom, err = localToken(server, dataDir, workerTokenFileName); err != nil {
					return fmt.Errorf("worker: %w", err)
				}
				if tokenFrom == "" {
					tokenFrom = "no token"
				} else {
					tokenFrom = "the token of " + tokenFrom
				}
			}
			var copts []api.ClientOption
			switch protocol {
			case "session":
			case "http":
				copts = append(copts, api.PlainCalls())
			default:
				return fmt.Errorf("worker: --protocol %q: want session or http", protocol)
			}
			c, err := api.NewClient(server, token, copts...)
			if err != nil {
				return err
			}
			if logFormat != "json" && logFormat != "console" {
				return fmt.Errorf("worker: --log-format %q: want json or console", logFormat)
			}
			if _, err := parseLevel(logLevel); err != nil {
				return fmt.Errorf("worker: --log-level: %w", err)
			}
			if offer.Labels, err = api.ParseLabels(labels); err != nil {
				return fmt.Errorf("worker: --label: %w", err)
			}
			if retention < 0 {
				return fmt.Errorf("worker: --retention %v: want 0 (keep every run directory) or more", retention)
			}
			logger := newLogger(LogConfig{Format: logFormat, Level: logLevel}, m.Stderr).With().Str("worker", id).Logger()
			bootID, err := daemonBootID(cmd.Context(), c, logger)
			if err != nil || cmd.Context().Err() != nil {
				return err // stopped before the daemon answered: nothing to do
			}
			clock := hostclock.For(bootID)
			if strings.Contains(server, ",") {
				// An active daemon and standbys: the one that takes over
				// may be on another host. In doubt, as For says.
				clock = hostclock.For("")
			}
			exec, err := local.New(local.Options{Dir: workdir, Logger: logger, Clock: clock, Retention: retention})
			if err != nil {
				return err
			}
			w, err := worker.New(worker.Options{
				ID: id, Capacity: capacity, Daemon: c, Executor: exec, Logger: logger, Now: clock.Now, Offer: offer,
				Timing: timing.Default(), // until the daemon's first answer
			})
			if err != nil {
				return err
			}
			logger.Info().Str("server", server).Int("capacity", capacity).Str("workdir", workdir).
				Str("fence_clock", clock.String()).Float64("retention_seconds", retention.Seconds()).Msg("worker running")
			go exec.RunRetention(cmd.Context())
			err = w.Run(cmd.Context())
			if errors.Is(err, worker.ErrRefused) {
				err = fmt.Errorf("the daemon at %s refuses %s (set $LEASELOG_TOKEN or --token-file to worker %q's token): %w", server, tokenFrom, id, err)
				logger.Error().Err(err).Msg("worker stopped")
				return err
			}
			if err != nil {
				logger.Error().Err(err).Msg("worker stopped")
				return err
			}
			logger.Info().Msg("worker stopped; its jobs still running are left to their supervisors, re-attached at its next start")
			return nil
		},
	}
	cmd.Flags().StringVar(&server, "server", "", serverHelp)
	cmd.Flags().StringVar(&id, "id", "", "this worker's id (required; with auth, its token is $LEASELOG_TOKEN)")
	cmd.Flags().IntVar(&capacity, "capacity", runtime.NumCPU(), "jobs at once")
	cmd.Flags().StringSliceVar(&offer.Kinds, "kinds", nil, "the kinds of job this worker takes: run, evaluation (default: every kind)")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "KEY=VALUE this worker offers: it takes only jobs whose every label it offers (repeatable)")
	cmd.Flags().StringVar(&workdir, "workdir", "./leaselog-work", "where jobs run")
	cmd.Flags().StringVar(&logFormat, "log-format", "console", "json or console (coloured on a terminal only)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().DurationVar(&retention, "retention", local.DefaultRetention, "remove the run directories (and worktrees; refs stay) of jobs ended longer ago than this; 0 keeps them")
	cmd.Flags().StringVar(&protocol, "protocol", "session", "the worker calls' protocol: session (plain HTTP calls where the upgrade is refused) or http")
	cmd.Flags().BoolVar(&session, "session", true, "the default")
	_ = cmd.Flags().MarkDeprecated("session", "sessions are the default; --protocol http makes plain calls")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "read this worker's token from FILE (mode 0600) instead of $LEASELOG_TOKEN")
	cmd.Flags().StringVar(&dataDir, "data", "", "with no $LEASELOG_TOKEN nor --token-file, send the workers' token a local daemon keeps in DIR/worker-token (default $LEASELOG_DATA or "+defaultDataDir+")")
	return cmd
}

// daemonBootID asks the daemon for its boot id until it answers: the fence
// clock depends on it. A daemon that announces none gets "" (and the worker
// CLOCK_BOOTTIME). A refusal (a 4xx: a bad token) ends the worker.
func daemonBootID(ctx context.Context, c *api.Client, logger zerolog.Logger) (string, error) {
	backoff := worker.NewBackoff(2*time.Second, rand.Float64)
	for attempt := 1; ; attempt++ {
		h, err := c.Health(ctx)
		if err == nil {
			return h.BootID, nil
		}
		var apiErr *api.Error
		if errors.As(err, &apiErr) && apiErr.Status < 500 {
			return "", fmt.Errorf("worker: the daemon's /healthz: %w", err)
		}
		wait := backoff.Next()
		if attempt == 1 || attempt%10 == 0 {
			logger.Warn().Err(explainUnreachable(err)).Int("attempt", attempt).Float64("retry_in_seconds", wait.Seconds()).
				Msg("daemon not reachable yet; retrying")
		}
		select {
		case <-ctx.Done():
			return "", nil
		case <-time.After(wait):
		}
	}
}
