package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/server"
	"github.com/leaselog/leaselog/worker"
	"github.com/leaselog/leaselog/worker/local"
	"github.com/leaselog/leaselog/worker/local/supervise"
)

// logsPoll is how often `logs --follow` asks for more output.
const logsPoll = 200 * time.Millisecond

func (m *Main) logsCommand() *cobra.Command {
	var f clientFlags
	var follow bool
	var stream, workdir string
	var leaseID uint64
	cmd := &cobra.Command{
		Use:   "logs JOB [--follow] [--stream stdout|stderr] [--lease N] [--workdir DIR]",
		Short: "Show a job's output: its stdout here on stdout, its stderr on stderr",
		Long: `Show the output of a job's latest run (or of --lease N): the job's standard
output is written to this command's standard output, its standard error to
standard error. --follow keeps reading until the job ends; a job still queued
is waited for, and a retry's output follows its predecessor's.

The daemon serves the output of the jobs its own worker ("local") ran. A
remote worker (leaselog worker) keeps its jobs' output in its run directories
on its machine: there, --workdir DIR (the worker's --workdir) reads them
without asking the daemon.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			streams := []string{"stdout", "stderr"}
			switch stream {
			case "":
			case "stdout", "stderr":
				streams = []string{stream}
			default:
				return fmt.Errorf("logs: --stream %q: want stdout or stderr", stream)
			}
			var src outputSource
			if workdir != "" {
				src = dirOutput{root: workdir, wait: follow}
			} else {
				c, err := f.client()
				if err != nil {
					return err
				}
				src = daemonOutput{c: c}
			}
			out := map[string]io.Writer{"stdout": m.Stdout, "stderr": m.Stderr}
			return tailOutput(cmd.Context(), src, args[0], leaseID, streams, out, follow, m.Stderr)
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep reading until the job ends")
	cmd.Flags().StringVar(&stream, "stream", "", "only stdout or only stderr (default both)")
	cmd.Flags().Uint64Var(&leaseID, "lease", 0, "the run of this lease (default the job's latest)")
	cmd.Flags().StringVar(&workdir, "workdir", "", "read the run directories of a worker on this machine (its --workdir) instead of asking the daemon")
	return cmd
}

// chunk is a piece of a job's output.
type chunk struct {
	data  []byte
	lease uint64 // 0: no run yet
	// final: read after the run (or the job) was known to be over, so
	// nothing follows these bytes.
	final bool
}

// outputSource reads a job's output, from the daemon or a run directory.
type outputSource interface {
	read(ctx context.Context, job string, lease uint64, stream string, offset int64) (chunk, error)
}

// daemonOutput reads from the daemon (its own worker's jobs).
type daemonOutput struct{ c *api.Client }

func (d daemonOutput) read(ctx context.Context, job string, lease uint64, stream string, offset int64) (chunk, error) {
	o, err := d.c.Output(ctx, job, api.OutputQuery{Stream: stream, Offset: offset, Lease: lease})
	if err != nil {
		return chunk{}, err
	}
	return chunk{data: o.Data, lease: o.Lease, final: api.FinalState(o.JobState)}, nil
}

// dirOutput reads the run directories of a worker on this machine.
type dirOutput struct {
	root string
	wait bool // a job not started here yet is waited for, not an error
}

func (d dirOutput) read(ctx context.Context, job string, lease uint64, stream string, offset int64) (chunk, error) {
	dir, found, err := local.FindRun(d.root, job, lease)
	if errors.Is(err, local.ErrNoRun) && lease == 0 && d.wait {
		return chunk{}, nil // not started here yet
	}
	if err != nil {
		return chunk{}, err
	}
	ended := local.RunEnded(dir) // before the bytes: once over, they are all
	b, err := local.ReadOutput(ctx, dir, stream, offset, server.MaxOutputChunk)
	return chunk{data: b, lease: found, final: ended}, err
}

// tailOutput copies a job's streams to out: once, or with follow until the
// job ends (every stream's last read was final). A new lease (a retry)
// starts its streams from the beginning, announced on note. A follow that
// loses the daemon (restarted, say) says so on note and asks again with
// backoff, from where it was — once it has had an answer: a daemon never
// reached (a wrong --server, no daemon running) is an error at once, as for
// every other command.
func tailOutput(ctx context.Context, src outputSource, job string, lease uint64, streams []string, out map[string]io.Writer, follow bool, note io.Writer) error {
	t := &tail{src: src, job: job, lease: lease, streams: streams, out: out, note: note, st: make([]streamState, len(streams))}
	backoff := worker.NewBackoff(5*time.Second, rand.Float64)
	lost := false
	for {
		err := t.pass(ctx)
		wait := logsPoll
		switch {
		case err != nil && follow && transient(err) && t.reached && ctx.Err() == nil:
			if !lost {
				fmt.Fprintf(note, "leaselog: logs %s: %v; trying again\n", job, explainUnreachable(err))
				lost = true
			}
			wait = backoff.Next()
		case err != nil:
			return fmt.Errorf("logs %s: %w", job, err)
		case !follow || t.final():
			return nil
		default:
			lost = false
			backoff.Reset()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// transient tells a failure a follow outlives: the daemon out of reach, or
// failing inside (5xx).
func transient(err error) bool {
	var op *net.OpError
	var apiErr *api.Error
	return errors.As(err, &op) || (errors.As(err, &apiErr) && apiErr.Status >= 500)
}

// tail is the state of tailOutput.
type tail struct {
	src       outputSource
	job       string
	lease     uint64
	streams   []string
	out       map[string]io.Writer
	note      io.Writer
	st        []streamState
	announced uint64 // the lease whose output is shown
	reached   bool   // the daemon answered a read (an error too)
}

type streamState struct {
	lease  uint64
	offset int64
	final  bool
}

// final reports whether every stream's last read was final.
func (t *tail) final() bool {
	for _, s := range t.st {
		if !s.final {
			return false
		}
	}
	return true
}

// pass reads every stream as far as it goes now.
func (t *tail) pass(ctx context.Context) error {
	for i, stream := range t.streams {
		st := &t.st[i]
		for {
			c, err := t.src.read(ctx, t.job, t.lease, stream, st.offset)
			var answer *api.Error
			t.reached = t.reached || err == nil || errors.As(err, &answer)
			if err != nil {
				return err
			}
			if c.lease != st.lease {
				prev := st.lease
				st.lease, st.offset = c.lease, 0
				if prev != 0 && c.lease != t.announced {
					fmt.Fprintf(t.note, "leaselog: job %s: its output from lease %d on\n", t.job, c.lease)
				}
				t.announced = c.lease
				if prev != 0 {
					continue // what was read is the new run's, from the old offset
				}
			}
			st.final = c.final
			if len(c.data) == 0 {
				break
			}
			if _, err := t.out[stream].Write(c.data); err != nil {
				return err
			}
			st.offset += int64(len(c.data))
		}
	}
	return nil
}

// localOutput is the daemon's server.OutputSource: the run directories of
// its local worker.
type localOutput struct{ dir string }

func (localOutput) Worker() string { return "local" }

func (o localOutput) Output(ctx context.Context, job string, lease uint64, stream string, offset int64, max int) ([]byte, error) {
	dir, _, err := local.FindRun(o.dir, job, lease)
	if err == nil {
		var b []byte
		if b, err = local.ReadOutput(ctx, dir, stream, offset, max); err == nil {
			return b, nil
		}
	}
	var kind *supervise.KindError
	switch {
	case errors.Is(err, local.ErrNoRun):
		return nil, fmt.Errorf("%w: %w", server.ErrNoOutput, err)
	case errors.As(err, &kind):
		return nil, fmt.Errorf("%w: %w", server.ErrOutputRefused, err)
	}
	return nil, err
}
