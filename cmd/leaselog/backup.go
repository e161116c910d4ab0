package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"
)

func (m *Main) backupCommand() *cobra.Command {
	var f clientFlags
	var to string
	cmd := &cobra.Command{
		Use:   "backup --to DIR [--server ADDR]",
		Short: "Write a consistent copy of the running daemon's store into DIR, on the daemon's host (admin)",
		Long: `Ask the daemon to write a consistent copy of its store (Pebble's checkpoint)
into DIR, on the daemon's host, while it goes on serving: the copy holds every
event acknowledged before the command began. DIR must be an absolute path, and
must not exist or be empty; its parent must exist. The copy is made in a hidden
directory beside DIR and renamed to DIR once whole.

Check it with leaselog replay --data DIR --verify; start a daemon from it with
leaselog serve --data DIR. It holds neither the daemon's alive mark (a daemon
started from it counts its downtime from its last event) nor its admin token
(a new one is made). A daemon of engine jetstream refuses: back its stream up
with NATS (docs/cluster.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case to == "":
				return errors.New("backup: --to DIR is required: the directory to write the copy in, on the daemon's host")
			case !filepath.IsAbs(to):
				return fmt.Errorf("backup: --to %s: give an absolute path: the daemon writes it on its own host, not in this command's directory", to)
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			b, err := c.Backup(cmd.Context(), to)
			if err != nil {
				return fmt.Errorf("backup: %w", err)
			}
			p := f.printer(cmd.OutOrStdout(), "TO", "SEQ", "FILES", "BYTES", "SECONDS")
			p.row(b, b.To, b.Seq, b.Files, b.Bytes, fmt.Sprintf("%.3f", b.TookSeconds))
			p.flush()
			if f.output == "table" {
				fmt.Fprintf(cmd.ErrOrStderr(), "every event up to seq %d is in %s, on the daemon's host: check it there with leaselog replay --data %s --verify\n", b.Seq, b.To, b.To)
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&to, "to", "", "the directory to write the copy in: an absolute path on the daemon's host, not there yet or empty (required)")
	return cmd
}
