package main

import (
	"context"
	"os"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/leaselog/leaselog/demo"
)

func (m *Main) demoCommand() *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "A guided run on a temporary folder: an expiry, a requeue, a stale report, a duplicate report, a restart",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := os.MkdirTemp("", "leaselog-demo-")
			if err != nil {
				return err
			}
			if !keep {
				defer os.RemoveAll(dir)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			return demo.Run(ctx, demo.Options{Out: cmd.OutOrStdout(), Dir: dir, Keep: keep, Start: startDemoDaemon})
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the temporary folder (its log can then be replayed)")
	return cmd
}

// startDemoDaemon starts the daemon of serve for the demo: on the
// defaults, but for the demo's data, timing and local worker, listening on
// a free loopback port.
func startDemoDaemon(ctx context.Context, c demo.Config) (demo.Daemon, error) {
	cfg := DefaultConfig()
	cfg.Store.Dir = c.Data
	cfg.Server.Listen = "127.0.0.1:0"
	e := &cfg.Plugins.Executor
	e.RenewSeconds, e.GraceSeconds, e.TolerationSeconds = c.Timing.Renew.Seconds(), c.Timing.Grace.Seconds(), c.Timing.Toleration.Seconds()
	e.LocalCapacity = &c.LocalCapacity
	logger := zerolog.New(c.Log).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	d, err := startDaemon(ctx, cfg, logger, startOptions{})
	if err != nil {
		return nil, err
	}
	return demoDaemon{d}, nil
}

// demoDaemon is a daemon as the demo sees it.
type demoDaemon struct{ d *daemon }

func (d demoDaemon) URL() string   { return d.d.url() }
func (d demoDaemon) Token() string { return d.d.token }
func (d demoDaemon) Stop() error   { return d.d.stop() }
