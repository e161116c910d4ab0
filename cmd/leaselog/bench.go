package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/workload"
)

// Limits of the bench's flags.
const (
	benchMaxJobs    = 10_000_000
	benchMaxWorkers = 10_000
)

func (m *Main) benchCommand() *cobra.Command {
	var f clientFlags
	var jobs, workers, enqueuers, heartbeats, batch int
	var workerID, workerTokenFile, protocol string
	var h2c bool
	var scale scaleFlags
	cmd := &cobra.Command{
		Use:   "bench --server URL [--jobs N] [--workers W] [--heartbeats H] [--enqueuers E] [--protocol P] [-o json]",
		Short: "Measure a running daemon on the lease lifecycle: submit, acquire + start, heartbeats, report",
		Long: `Run the lease-lifecycle workload (docs/workload.md) against a running
daemon with the Go client: E enqueuers submit N jobs of kind evaluation
(the daemon runs nothing for them); W workers, goroutines with a
worker id each, acquire one (a long poll) and start it, heartbeat it H times
in a row and report it succeeded, until N jobs are done. Each call is timed
by its caller; acquire includes its start and any wait of the long poll for
a queued job.

--protocol says which calls: session (the default, what the Go worker does)
makes the fewest round trips, using all three parts below, with the workers'
calls over a worker session (one connection all the workers share, each call
a frame: GET /v1/session; plain HTTP calls if the daemon or a proxy refuses
the upgrade), the submits over HTTP; http (or combined) is the same calls
over HTTP/1.1; classic is one HTTP call a step, 4 + H calls a job (7 with the
default 3 heartbeats); and a comma-separated list of the parts shows each
step, over HTTP unless session is among them (start,session):
  start  acquire with start: the grant comes back running, no start call
  next   the report carries the worker's next acquire (no wait): a job it
         grants has no acquire call of its own (acquire_ms counts only the
         acquires made alone, and report_ms includes the carried acquire)
  batch  submit --batch jobs a call (submit_ms is per call)
calls_per_job is what the run made, long polls that found nothing included.

Throughput is N over the time from the first submit to the last accepted
report. Then the log is read back from where it stood before the run: every
job must have exactly one lease.reported (succeeded), no stale report, and
one accepted report in the run; otherwise the command names the jobs and
exits non-zero. Job ids are bench-<ULID>-<n>, new each run, so a daemon with
history is fine; it must have no other queued jobs (a worker takes the
oldest queued job, whoever submitted it). A run that stops (a call fails,
or Ctrl-C) lets its calls in flight finish, reports the leases it holds
failed and cancels its jobs left queued, and exits non-zero.

Submits and the check use the token every client command sends (--data,
$LEASELOG_TOKEN). The workers' calls need a worker's token or an open daemon
(no [auth] and no local worker, or serve --open): an admin token cannot act
as a worker. With a worker token ($LEASELOG_WORKER_TOKEN or
--worker-token-file), give its --worker-id: all W workers then act as that
one worker, holding W leases at once.

Progress goes to stderr when it is a terminal. -o json prints one object:
jobs, workers, enqueuers, heartbeats, protocol, http (http1 or h2c, +session
if the workers' calls went over sessions), seconds, jobs_per_second,
calls_per_job, and submit_ms, acquire_ms, heartbeat_ms, report_ms, each with
count, p50, p90, p99, max and mean (nearest-rank over all samples).

The scale modes run a daemon of their own (this binary's serve, or
--daemon-binary's, no local worker, an open API on a free port of
127.0.0.1, its data in --store or a temporary directory) and read its
process metrics (CPU, RSS) from its /metrics:

--mode density: W workers take L leases each (--leases) of W×L jobs
submitted in batches of 1,000, and never report them; with the daemon
stopped, its store is compacted whole and measured; then, on the daemon
restarted with renew_seconds = --renew (grace and toleration 5× and 30×
it), every worker heartbeats all its leases in one call every --renew,
the workers' calls spread over the renew, for --duration. It prints the
heartbeat calls' latency, the daemon's CPU per lease-heartbeat and its
RSS over the heartbeating, the store's growth per lease-heartbeat once
compacted whole again (the daemon stopped), and the leases lost (lease.expired
events, heartbeats answered other than continue). Full size:
  leaselog bench --mode density --workers 5000 --leases 100 --renew 10s --duration 5m

--mode million: after 50 acquires (each with start, each reported) with
1,000 jobs queued, submits the rest of --jobs N in batches of 1,000
(--enqueuers at once, default 4), then times pages of 100 jobs (queued,
and of any state) and 50 acquires with N queued, SIGKILLs the daemon,
restarts it and times it until it answers /healthz, and acquires again.
It prints the daemon's RSS at the start, at most while the jobs were
submitted (read every 250 ms), after, and after the restart. Full size:
  leaselog bench --mode million --jobs 1000000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case jobs < 1 || jobs > benchMaxJobs:
				return fmt.Errorf("bench: --jobs %d: want 1 to %d", jobs, benchMaxJobs)
			case workers < 1 || workers > benchMaxWorkers:
				return fmt.Errorf("bench: --workers %d: want 1 to %d", workers, benchMaxWorkers)
			case enqueuers < 0 || enqueuers > benchMaxWorkers:
				return fmt.Errorf("bench: --enqueuers %d: want 0 (as many as --workers) to %d", enqueuers, benchMaxWorkers)
			case heartbeats < 0 || heartbeats > 1000:
				return fmt.Errorf("bench: --heartbeats %d: want 0 to 1000", heartbeats)
			case batch < 1 || batch > 1000:
				return fmt.Errorf("bench: --batch %d: want 1 to 1000 (a batch submit's limit)", batch)
			}
			proto, err := workload.ParseProtocol(protocol, batch)
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			var opts []api.ClientOption
			if h2c {
				opts = append(opts, api.H2C())
			}
			if scale.mode != modeLifecycle {
				http := "http1"
				if h2c {
					http = "h2c"
				}
				if proto.Session {
					opts = append(opts, api.Session())
					http += "+session"
				}
				return m.runScale(cmd, scale, f, workers, jobs, enqueuers, opts, http)
			}
			if enqueuers == 0 {
				enqueuers = workers
			}
			admin, err := f.client(opts...)
			if err != nil {
				return err
			}
			wopts := opts
			if !proto.Session {
				wopts = append(slices.Clone(opts), api.PlainCalls())
			}
			worker, err := m.benchWorkerClient(&f, workerID, workerTokenFile, wopts)
			if err != nil {
				return err
			}
			c := workload.Config{
				Admin: admin, Worker: worker,
				Jobs: jobs, Workers: workers, Enqueuers: enqueuers, Heartbeats: heartbeats, Protocol: proto,
				Prefix: "bench-" + ulid.Make().String(), WorkerID: workerID, HTTP: "http1",
			}
			if h2c {
				c.HTTP = "h2c"
			}
			stderr := cmd.ErrOrStderr()
			if isTerminal(stderr) {
				t0 := time.Now()
				c.Progress = func(done, submitted int64) {
					s := time.Since(t0).Seconds()
					fmt.Fprintf(stderr, "\r%s: %d/%d submitted, %d/%d done, %.0f jobs/s   ", c.Prefix, submitted, jobs, done, jobs, float64(done)/s)
				}
			}
			r, err := workload.Run(cmd.Context(), c)
			if r != nil && worker.Sessions() { // false too if the upgrade was refused
				r.HTTP += "+session"
			}
			if c.Progress != nil {
				fmt.Fprintln(stderr)
			}
			if r == nil {
				return fmt.Errorf("bench %s: %w", c.Prefix, err)
			}
			if f.output == "json" {
				out, _ := json.Marshal(r)
				fmt.Fprintln(cmd.OutOrStdout(), string(out))
			} else {
				r.WriteTable(cmd.OutOrStdout())
			}
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			return nil
		},
	}
	f.register(cmd)
	scale.register(cmd)
	cmd.Flags().IntVar(&jobs, "jobs", 20000, "jobs to submit and take through their lifecycle")
	cmd.Flags().IntVar(&workers, "workers", 16, "concurrent workers (goroutines, each one lease at a time)")
	cmd.Flags().IntVar(&enqueuers, "enqueuers", 0, "concurrent submitters (0: as many as --workers)")
	cmd.Flags().IntVar(&heartbeats, "heartbeats", 3, "heartbeats of each lease between its start and its report")
	cmd.Flags().StringVar(&protocol, "protocol", "session", "session, http (combined), classic, or parts: start,next,batch,session (see above)")
	cmd.Flags().IntVar(&batch, "batch", 100, "jobs a submit call with the batch part")
	cmd.Flags().BoolVar(&h2c, "h2c", false, "speak HTTP/2 without TLS (one connection for the workers, one for the submits) instead of HTTP/1.1")
	cmd.Flags().StringVar(&workerID, "worker-id", "", "every worker acts as this worker id (needed with a worker token); default: one id each, bench-<ULID>-wNNN")
	cmd.Flags().StringVar(&workerTokenFile, "worker-token-file", "", "the workers' token from FILE (mode 0600) instead of $LEASELOG_WORKER_TOKEN; default: the token of the submits")
	return cmd
}

// benchWorkerClient is the client of the bench's workers: one of its own
// (its own connections), with the worker token if one is given, else the
// same token as every client command.
func (m *Main) benchWorkerClient(f *clientFlags, workerID, tokenFile string, opts []api.ClientOption) (*api.Client, error) {
	if workerID != "" {
		if err := lease.CheckID("worker", workerID); err != nil {
			return nil, fmt.Errorf("bench: --worker-id: %w", err)
		}
	}
	token, set := os.LookupEnv("LEASELOG_WORKER_TOKEN")
	if tokenFile != "" {
		t, err := readTokenFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("bench: --worker-token-file: %w", err)
		}
		token, set = t, true
	}
	if !set {
		return f.client(opts...)
	}
	if strings.TrimSpace(token) == "" {
		return nil, errors.New("bench: LEASELOG_WORKER_TOKEN is set but blank: unset it or give it a token")
	}
	if workerID == "" {
		return nil, errors.New("bench: a worker token is one worker's: give its --worker-id")
	}
	server := f.server
	if server == "" {
		server = os.Getenv("LEASELOG_SERVER")
	}
	return api.NewClient(server, token, opts...)
}

// isTerminal tells whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
