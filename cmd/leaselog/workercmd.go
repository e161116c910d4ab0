package main

import (
	"errors"
	"os"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/worker"
	"github.com/leaselog/leaselog/worker/local"
)

func (m *Main) workerCommand() *cobra.Command {
	var server, id, workdir, logFormat string
	var capacity int
	cmd := &cobra.Command{
		Use:   "worker --server URL --id ID [--capacity N] [--workdir DIR]",
		Short: "Run a worker on this machine against a remote daemon",
		Long: `Run a worker: take leases from the daemon at --server, run their jobs as
processes here (in git worktrees under --workdir when a job names a repo),
heartbeat every renew_seconds, and report. The worker stops its own jobs when
the daemon has not acknowledged a heartbeat for toleration − 2×renew seconds.
Stopping the worker leaves its jobs running; started again with the same id
and workdir, it re-attaches to them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := lease.CheckID("worker", id); err != nil {
				return errors.New("worker: --id: " + err.Error())
			}
			if server == "" {
				server = os.Getenv("LEASELOG_SERVER")
			}
			c, err := api.NewClient(server, os.Getenv("LEASELOG_TOKEN"))
			if err != nil {
				return err
			}
			logger := newLogger(LogConfig{Format: logFormat, Level: "info"}, m.Stderr).With().Str("worker", id).Logger()
			exec, err := local.New(local.Options{Dir: workdir, Logger: logger})
			if err != nil {
				return err
			}
			w, err := worker.New(worker.Options{
				ID: id, Capacity: capacity, Daemon: c, Executor: exec, Logger: logger,
				Timing: api.TimingOf(lease.DefaultConfig()), // until the daemon's first answer
			})
			if err != nil {
				return err
			}
			logger.Info().Str("server", server).Int("capacity", capacity).Str("workdir", workdir).Msg("worker running")
			return w.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "daemon address (default $LEASELOG_SERVER or "+api.DefaultServer+")")
	cmd.Flags().StringVar(&id, "id", "", "this worker's id (required; with auth, its token is $LEASELOG_TOKEN)")
	cmd.Flags().IntVar(&capacity, "capacity", runtime.NumCPU(), "jobs at once")
	cmd.Flags().StringVar(&workdir, "workdir", "./leaselog-work", "where jobs run")
	cmd.Flags().StringVar(&logFormat, "log-format", "console", "json or console")
	return cmd
}
