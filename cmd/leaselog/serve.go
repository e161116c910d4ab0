package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

func (m *Main) serveCommand() *cobra.Command {
	var (
		configPath, dir, listen, logFormat string
		capacity                           int
	)
	cmd := &cobra.Command{
		Use:   "serve [--config FILE] [--data DIR] [--listen ADDR]",
		Short: "Run the daemon, with its built-in local worker",
		Long: `Run the daemon: the HTTP API executors, workers and auditors talk to, the
sweeper that expires silent workers, and the built-in worker "local", which
runs jobs as processes on this machine (local_capacity at once).

SIGTERM or SIGINT stops it gracefully: queued jobs are cancelled ("daemon
stopped"), daemon.stopping is recorded, and jobs in flight keep running; on
the next start the local worker re-attaches to each of them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			if f.Changed("log-format") {
				cfg.Log.Format = logFormat
			}
			if f.Changed("local-capacity") {
				cfg.Plugins.Executor.LocalCapacity = &capacity
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
	cmd.Flags().StringVar(&logFormat, "log-format", "", "json or console (log.format)")
	cmd.Flags().IntVar(&capacity, "local-capacity", 0, "jobs the local worker runs at once; 0: no local worker")
	return cmd
}

func newLogger(c LogConfig, w io.Writer) zerolog.Logger {
	if c.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	lvl, _ := parseLevel(c.Level)
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

func parseLevel(s string) (zerolog.Level, error) {
	if s == "" {
		return zerolog.InfoLevel, nil
	}
	lvl, err := zerolog.ParseLevel(s)
	if err != nil || lvl == zerolog.NoLevel {
		return 0, fmt.Errorf("unknown level %q (want debug, info, warn or error)", s)
	}
	return lvl, nil
}

// serve runs the daemon until ctx is done, then stops it gracefully.
func serve(ctx context.Context, cfg Config, stderr io.Writer) error {
	d, err := startDaemon(cfg, newLogger(cfg.Log, stderr))
	if err != nil {
		return err
	}
	var runErr error
	select {
	case <-ctx.Done():
		d.logger.Info().Msg("stopping: cancelling queued jobs; jobs in flight keep running")
	case runErr = <-d.errs:
		d.logger.Error().Err(runErr).Msg("stopping after a failure")
	}
	return errors.Join(runErr, d.stop())
}
