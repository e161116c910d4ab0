// Command leaselog is the single binary of leaselog: the daemon, its workers,
// the client commands of executors and auditors, and offline tools.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/worker/local/supervise"
)

func main() {
	// A job's supervisor is this binary run again: it must become one
	// before anything else happens (see package supervise).
	supervise.Init()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := (&Main{Stdout: os.Stdout, Stderr: os.Stderr, Exec: syscall.Exec}).Run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "leaselog:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}

// Main is the program, with its streams, so that tests run it in-process.
type Main struct {
	Stdout, Stderr io.Writer
	// Exec replaces the process (syscall.Exec), for the commands that drop
	// a token from their environment; nil, as in tests, unsets it instead.
	Exec execFunc
}

// Run runs the command line args (without the program name).
func (m *Main) Run(ctx context.Context, args []string) error {
	root := &cobra.Command{
		Use:           "leaselog",
		Short:         "A durable lease manager for job executors",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(m.Stdout)
	root.SetErr(m.Stderr)
	root.SetArgs(args)
	root.AddCommand(
		m.serveCommand(), m.workerCommand(),
		m.submitCommand(), m.revokeCommand(false), m.revokeCommand(true), m.jobsCommand(), m.leasesCommand(),
		m.eventsCommand(), m.auditCommand(), m.logsCommand(), m.backupCommand(),
		m.replayCommand(), m.demoCommand(), m.benchCommand(), m.versionCommand(),
	)
	err := explainUnreachable(root.ExecuteContext(ctx))
	var apiErr *api.Error
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusUnauthorized {
		err = fmt.Errorf("%w (a token is $LEASELOG_TOKEN, or the token file of the daemon's data directory: --data DIR, $LEASELOG_DATA or %s)", err, defaultDataDir)
	}
	return err
}

// exitError carries a specific exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
