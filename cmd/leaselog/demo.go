package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/worker"
	"github.com/leaselog/leaselog/worker/local"
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
			return (&demo{out: cmd.OutOrStdout(), dir: dir, keep: keep}).run(ctx)
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the temporary folder (its log can then be replayed)")
	return cmd
}

type demo struct {
	out    io.Writer
	dir    string
	keep   bool
	cfg    Config
	d      *daemon
	c      *api.Client
	shown  uint64
	logger zerolog.Logger
}

func (x *demo) say(format string, args ...any) { fmt.Fprintf(x.out, format+"\n", args...) }

func (x *demo) run(ctx context.Context) error {
	logFile, err := os.Create(filepath.Join(x.dir, "daemon.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	x.logger = zerolog.New(logFile).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	x.cfg = DefaultConfig()
	x.cfg.Store.Dir = filepath.Join(x.dir, "data")
	x.cfg.Server.Listen = "127.0.0.1:0"
	x.cfg.Plugins.Executor.RenewSeconds, x.cfg.Plugins.Executor.GraceSeconds, x.cfg.Plugins.Executor.TolerationSeconds = 0.2, 1, 3
	none := 0 // the local worker joins in part 5; until then workers w1 and w2 take the jobs
	x.cfg.Plugins.Executor.LocalCapacity = &none
	x.say("leaselog demo — a daemon on %s, with fast timings: renew 0.2s, grace 1s, toleration 3s.", x.dir)
	x.say("Its log goes to %s/daemon.log.\n", x.dir)
	if err := x.start(); err != nil {
		return err
	}
	defer func() {
		if x.d != nil {
			_ = x.d.stop()
		}
	}()

	// 1. A worker dies during an evaluation.
	x.say("1. A worker dies during an evaluation.")
	if _, err := x.submit(ctx, "eval-1", "evaluation", "sleep 60"); err != nil {
		return err
	}
	w1Dir := filepath.Join(x.dir, "w1")
	w1, err := x.remoteWorker("w1", w1Dir)
	if err != nil {
		return err
	}
	w1Ctx, killW1 := context.WithCancel(ctx)
	defer killW1()
	go func() { _ = w1.Run(w1Ctx) }()
	first, err := x.waitEvent(ctx, "lease.running", "eval-1", 0)
	if err != nil {
		return err
	}
	x.say("   Worker w1 took eval-1 with lease %d and started it. Now w1 dies: its heartbeats stop and its job is killed.", first.Lease)
	killW1()
	if err := killRun(w1Dir, "eval-1", first.Lease); err != nil {
		return err
	}
	requeued, err := x.waitEvent(ctx, "lease.queued", "eval-1", first.Seq)
	if err != nil {
		return err
	}
	x.trail(ctx)
	x.say("   Silent past grace, w1 became unreachable; past toleration its lease expired, and the evaluation went back to the queue: partial output is never scored.\n")

	// 2. Requeued, with a new token.
	x.say("2. Another worker takes it, with a new fencing token.")
	w2Ctx, stopW2 := context.WithCancel(ctx)
	defer stopW2()
	// w2 runs the job with a different command: same job, a quick success this time.
	w2, err := x.remoteWorker("w2", filepath.Join(x.dir, "w2"))
	if err != nil {
		return err
	}
	go func() { _ = w2.Run(w2Ctx) }()
	second, err := x.waitEvent(ctx, "lease.running", "eval-1", requeued.Seq)
	if err != nil {
		return err
	}
	x.say("   w2 runs eval-1 with lease %d > %d. It cannot finish a 60 s job in a demo: we kill the job, and w2 reports.", second.Lease, first.Lease)
	if _, err := x.c.Kill(ctx, "eval-1"); err != nil {
		return err
	}
	if _, err := x.waitEvent(ctx, "lease.reported", "eval-1", second.Seq); err != nil {
		return err
	}
	x.trail(ctx)
	stopW2()

	// 3. The late report.
	x.say("\n3. w1 comes back and reports its old lease %d, with the ref of its commits.", first.Lease)
	late := api.Report{Worker: "w1", Outcome: "succeeded", Ref: fmt.Sprintf("refs/leaselog/eval-1/%d", first.Lease)}
	_, err = x.c.Report(ctx, first.Lease, late)
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Code != api.CodeStaleLease {
		return fmt.Errorf("demo: the late report was answered %v, not stale_lease", err)
	}
	x.say("   Refused: HTTP %d %s — and kept as event %d for auditors.", apiErr.Status, apiErr.Code, apiErr.StaleReportSeq)
	_, again := x.c.Report(ctx, first.Lease, late)
	if errors.As(again, &apiErr) {
		x.say("   Sent again, it gets the same answer (event %d), and nothing new is recorded.", apiErr.StaleReportSeq)
	}
	x.trail(ctx)

	// 4. The same report twice.
	x.say("\n4. w2's report, sent again (say its answer was lost on the way):")
	reply, err := x.c.Report(ctx, second.Lease, api.Report{Worker: "w2", Outcome: "killed"})
	if err != nil {
		return err
	}
	x.say("   %+v — the first report's answer; no new event, no second attempt.", reply)

	// 5. A restart with re-attach.
	x.say("\n5. The daemon's own local worker runs an agent; the daemon restarts under it.")
	one := 1
	x.cfg.Plugins.Executor.LocalCapacity = &one
	if err := x.d.stop(); err != nil {
		return err
	}
	x.d = nil
	if err := x.start(); err != nil {
		return err
	}
	signal := filepath.Join(x.dir, "finish-agent")
	if _, err := x.submit(ctx, "agent-1", "run", "while [ ! -e "+strconv.Quote(signal)+" ]; do sleep 0.05; done; echo the agent finished"); err != nil {
		return err
	}
	running, err := x.waitEvent(ctx, "lease.running", "agent-1", 0)
	if err != nil {
		return err
	}
	x.say("   agent-1 runs on worker %s with lease %d. Stopping the daemon (its agents keep running)…", running.Worker, running.Lease)
	if err := x.d.stop(); err != nil {
		return err
	}
	x.d = nil
	if err := x.start(); err != nil {
		return err
	}
	x.say("   …and starting it again. The local worker re-attaches to the agent; we let the agent finish.")
	if err := os.WriteFile(signal, nil, 0o644); err != nil {
		return err
	}
	if _, err := x.waitEvent(ctx, "lease.reported", "agent-1", running.Seq); err != nil {
		return err
	}
	x.trail(ctx)
	j, err := x.c.Job(ctx, "agent-1")
	if err != nil {
		return err
	}
	x.say("   agent-1 is %s (%s), attempts %d, same lease %d across the restart.", j.State, j.Outcome, j.Attempts, running.Lease)

	// 6. What an auditor sees.
	x.say("\n6. The audit trail of stale reports (leaselog audit stale-reports):")
	es, err := x.c.Events(ctx, api.EventQuery{Type: "lease.stale_report"})
	if err != nil {
		return err
	}
	for _, e := range es.Events {
		x.say("   seq %d  job %s  lease %d  worker %s  outcome %s  ref %s", e.Seq, e.Job, e.Lease, e.Worker, e.Outcome, e.Ref)
	}
	if x.keep {
		x.say("\nThe data is kept: leaselog replay --data %s --verify", x.cfg.Store.Dir)
	}
	return nil
}

func (x *demo) start() error {
	d, err := startDaemon(context.Background(), x.cfg, x.logger, startOptions{})
	if err != nil {
		return err
	}
	x.d = d
	x.c, err = api.NewClient(d.url(), d.token) // the generated admin token once the local worker joins
	return err
}

func (x *demo) submit(ctx context.Context, id, kind, run string) (api.Job, error) {
	spec := fmt.Sprintf(`{"run":%s}`, strconv.Quote(run))
	j, _, err := x.c.Submit(ctx, api.Submit{ID: id, Kind: kind, Spec: []byte(spec)})
	return j, err
}

func (x *demo) remoteWorker(id, dir string) (*worker.Worker, error) {
	logger := x.logger.With().Str("worker", id).Logger()
	exec, err := local.New(local.Options{Dir: dir, Logger: logger, StopGrace: time.Second})
	if err != nil {
		return nil, err
	}
	// A client of its own, as a remote worker has: stopping it ends its
	// worker session (its long poll's), not the demo's calls.
	c, err := api.NewClient(x.d.url(), x.d.token)
	if err != nil {
		return nil, err
	}
	return worker.New(worker.Options{ID: id, Capacity: 1, Daemon: c, Executor: exec, Logger: logger,
		Timing: x.cfg.Lease(), Wait: time.Second})
}

// waitEvent waits for the first event of a type and job after seq after.
func (x *demo) waitEvent(ctx context.Context, typ, job string, after uint64) (api.Event, error) {
	for {
		page, err := x.c.Events(ctx, api.EventQuery{Type: typ, Job: job, After: after})
		if err != nil {
			return api.Event{}, err
		}
		if len(page.Events) > 0 {
			return page.Events[0], nil
		}
		select {
		case <-ctx.Done():
			return api.Event{}, fmt.Errorf("demo: waiting for %s of %s: %w", typ, job, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// trail prints the events since the last print.
func (x *demo) trail(ctx context.Context) {
	page, err := x.c.Events(ctx, api.EventQuery{After: x.shown, Limit: 1000})
	if err != nil {
		x.say("   (events: %v)", err)
		return
	}
	for _, e := range page.Events {
		if e.Type == "lease.heartbeat" {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "     %4d  %-20s", e.Seq, e.Type)
		if e.Job != "" {
			fmt.Fprintf(&b, " job=%s", e.Job)
		}
		if e.Lease != 0 {
			fmt.Fprintf(&b, " lease=%d", e.Lease)
		}
		if e.Worker != "" {
			fmt.Fprintf(&b, " worker=%s", e.Worker)
		}
		if d := detail(e); d != "" {
			b.WriteString(" " + d)
		}
		x.say("%s", b.String())
	}
	x.shown = page.Next
}

// killRun kills a run's process group, as if its machine died.
func killRun(workdir, job string, lease uint64) error {
	b, err := os.ReadFile(filepath.Join(workdir, fmt.Sprintf("%s-%d", job, lease), ".leaselog", "pid"))
	if err != nil {
		return fmt.Errorf("demo: find the job's process: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("demo: pid file: %w", err)
	}
	return syscall.Kill(-pid, syscall.SIGKILL)
}
