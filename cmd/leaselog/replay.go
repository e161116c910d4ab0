package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/replay"
	"github.com/leaselog/leaselog/scenario"
)

func (m *Main) replayCommand() *cobra.Command {
	var dir, script string
	var verify bool
	cmd := &cobra.Command{
		Use:   "replay {--data DIR [--verify] | --script FILE}",
		Short: "Rebuild the lease table from a stopped daemon's log, offline, and print it; or play a scenario",
		Long: `Rebuild the lease table from the log in DIR (newest snapshot plus tail) and print it:
what a restart holds, the jobs that have not ended. Jobs that ended are in the
store's archive; --verify prints them too.

With --verify, fold the whole log from its first event instead and check it:
sequence numbers without a gap, every event a legal transition, fencing tokens
growing per job, every type index complete, the time index naming exactly the
runs of the events, every stored snapshot equal to the fold at its sequence
number, and the archive holding exactly the jobs that ended. Exit status 0
means the log is sound; 70, that the store is corrupt (the message names the
record's key or sequence number, or the file and its key range).

With --script FILE, play a scenario instead (the golden files of
testdata/scenarios; the language is package scenario's): each command drives
a daemon on an in-memory store with a manual clock, and the file is printed
with what each command printed under its ----. A golden file whose
expectations hold prints as it is; if any output differs, the command names
them and exits with status 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if script != "" {
				if dir != "" || verify {
					return errors.New("replay: --script plays a scenario on a store of its own: no --data or --verify with it")
				}
				return playScript(cmd.OutOrStdout(), script)
			}
			if dir == "" {
				return errors.New("replay: --data DIR or --script FILE is required")
			}
			out := cmd.OutOrStdout()
			// A directory that is not there is a mistake (a typo, the wrong
			// folder), not an empty log; and nothing is created to look.
			if fi, err := os.Stat(dir); err != nil {
				return fmt.Errorf("replay: --data %s: %w", dir, err)
			} else if !fi.IsDir() {
				return fmt.Errorf("replay: --data %s: not a directory", dir)
			}
			exists, err := eventlog.Exists(dir, nil)
			if err != nil {
				return fmt.Errorf("replay: %w", err)
			}
			if !exists {
				if verify {
					return fmt.Errorf("replay: --verify: no store in %s: nothing to verify", dir)
				}
				// Nothing has happened yet: an empty log folds to an empty table.
				fmt.Fprintf(out, "no store in %s yet: the log is empty\n", dir)
				projection.New().Dump(out)
				return nil
			}
			stderr := cmd.ErrOrStderr()
			log, err := eventlog.Open(dir, eventlog.Options{ReadOnly: true, Logger: zerolog.New(stderr).Level(zerolog.ErrorLevel),
				// Pebble found the store broken (a corrupt file, say): say what
				// it found, then exit as a daemon would.
				OnFatal: func(msg string) {
					// Its first line names the file and its key range; the
					// rest is a stack trace.
					msg, _, _ = strings.Cut(msg, "\n")
					fmt.Fprintf(stderr, "leaselog: replay: the store in %s is corrupt: %s\n", dir, msg)
					os.Exit(eventlog.ExitFatal)
				}})
			if err != nil {
				return fmt.Errorf("replay: %w", newerStore(dir, err))
			}
			defer log.Close()
			if verify {
				rep, err := replay.Verify(log)
				if err != nil {
					err = fmt.Errorf("verify %s: %w", dir, err)
					if errors.Is(err, eventlog.ErrCorrupt) { // it names the key or seq
						return &exitError{code: eventlog.ExitFatal, err: err}
					}
					return err
				}
				rep.Table.Dump(out)
				fmt.Fprintf(out, "verified: %d events, %d snapshots equal to the fold", rep.Events, rep.Snapshots)
				if rep.Older > 0 {
					fmt.Fprintf(out, " (%d of an older version not read)", rep.Older)
				}
				fmt.Fprintln(out)
				return nil
			}
			t, st, err := replay.Rebuild(log, zerolog.New(cmd.ErrOrStderr()))
			if err != nil {
				return fmt.Errorf("replay %s: %w", dir, err)
			}
			t.Dump(out)
			fmt.Fprintf(out, "rebuilt: snapshot at seq %d, then %d events\n", st.SnapshotSeq, st.Events)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "data", "", "the daemon's data directory")
	cmd.Flags().BoolVar(&verify, "verify", false, "fold the whole log and check every invariant")
	cmd.Flags().StringVar(&script, "script", "", "play the scenario in FILE and print it with its outputs")
	return cmd
}

// playScript plays a scenario file and prints it with its outputs.
func playScript(out io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("replay: --script: %w", err)
	}
	defer f.Close()
	diffs, err := scenario.Play(f, path, out)
	if err != nil {
		return fmt.Errorf("replay: --script: %w", err)
	}
	if len(diffs) > 0 {
		return fmt.Errorf("replay: --script %s: %d outputs differ from the file's, at %s", path, len(diffs), strings.Join(diffs, ", "))
	}
	return nil
}
