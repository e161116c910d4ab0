package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/lease"
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
	cmd := &cobra.Command{
		Use:   "bench --server URL [--jobs N] [--workers W] [--heartbeats H] [--enqueuers E] [--protocol P] [-o json]",
		Short: "Measure a running daemon on the lease lifecycle: submit, acquire + start, heartbeats, report",
		Long: `Run the standard lease-lifecycle workload (../shared/peers/WORKLOAD.md) against a
running daemon with the Go client: E enqueuers submit N jobs of kind
evaluation (the daemon runs nothing for them); W workers, goroutines with a
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
count, p50, p90, p99, max and mean (nearest-rank over all samples).`,
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
			proto, err := parseProtocol(protocol, batch)
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			if enqueuers == 0 {
				enqueuers = workers
			}
			var opts []api.ClientOption
			if h2c {
				opts = append(opts, api.H2C())
			}
			admin, err := f.client(opts...)
			if err != nil {
				return err
			}
			wopts := opts
			if !proto.session {
				wopts = append(slices.Clone(opts), api.PlainCalls())
			}
			worker, err := m.benchWorkerClient(&f, workerID, workerTokenFile, wopts)
			if err != nil {
				return err
			}
			b := &bench{
				admin: admin, worker: worker,
				jobs: jobs, workers: workers, enqueuers: enqueuers, heartbeats: heartbeats, proto: proto,
				prefix: "bench-" + ulid.Make().String(), workerID: workerID, http: "http1",
			}
			if h2c {
				b.http = "h2c"
			}
			stderr := cmd.ErrOrStderr()
			if isTerminal(stderr) {
				t0 := time.Now()
				b.progress = func(done, submitted int64) {
					s := time.Since(t0).Seconds()
					fmt.Fprintf(stderr, "\r%s: %d/%d submitted, %d/%d done, %.0f jobs/s   ", b.prefix, submitted, jobs, done, jobs, float64(done)/s)
				}
			}
			elapsed, runErr := b.run(cmd.Context())
			if worker.Sessions() { // false too if the upgrade was refused
				b.http += "+session"
			}
			if b.progress != nil {
				b.progress(b.done.Load(), b.submitted.Load())
				fmt.Fprintln(stderr)
			}
			if runErr != nil {
				return fmt.Errorf("bench %s: %w", b.prefix, runErr)
			}
			verified, checkErr := b.check(cmd.Context())
			r := b.result(elapsed, verified, checkErr)
			if f.output == "json" {
				out, _ := json.Marshal(r)
				fmt.Fprintln(cmd.OutOrStdout(), string(out))
			} else {
				r.table(cmd.OutOrStdout())
			}
			return checkErr
		},
	}
	f.register(cmd)
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

// benchLatency is one operation's latencies, in milliseconds.
type benchLatency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
}

// latencyOf sorts the samples and takes nearest-rank percentiles.
func latencyOf(s []time.Duration) benchLatency {
	if len(s) == 0 {
		return benchLatency{}
	}
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(float64(len(s))*p+0.999999999) - 1 // ceil(p·n) − 1
		return ms(s[min(max(i, 0), len(s)-1)])
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return benchLatency{Count: len(s), P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: ms(s[len(s)-1]), Mean: ms(sum / time.Duration(len(s)))}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// benchResult is the bench's output (-o json: one object).
type benchResult struct {
	Prefix        string       `json:"prefix"`
	Kind          string       `json:"kind"`
	Jobs          int          `json:"jobs"`
	Workers       int          `json:"workers"`
	Enqueuers     int          `json:"enqueuers"`
	Heartbeats    int          `json:"heartbeats"`
	Protocol      string       `json:"protocol"`
	HTTP          string       `json:"http"`            // http1 or h2c, +session if the workers' calls used sessions
	Batch         int          `json:"batch,omitempty"` // jobs a submit call
	CallsPerJob   float64      `json:"calls_per_job"`   // as made, empty long polls too
	Seconds       float64      `json:"seconds"`
	JobsPerSecond float64      `json:"jobs_per_second"`
	Submit        benchLatency `json:"submit_ms"`
	Acquire       benchLatency `json:"acquire_ms"`
	Heartbeat     benchLatency `json:"heartbeat_ms"`
	Report        benchLatency `json:"report_ms"`
	Checked       bool         `json:"checked"` // every job reported exactly once
	Check         string       `json:"check"`   // what the check found
}

func (b *bench) result(elapsed time.Duration, verified string, checkErr error) benchResult {
	r := benchResult{
		Prefix: b.prefix, Kind: benchKind, Jobs: b.jobs, Workers: b.workers, Enqueuers: b.enqueuers, Heartbeats: b.heartbeats,
		Protocol: b.proto.String(), Batch: b.proto.batch, HTTP: b.http,
		CallsPerJob: float64(b.calls.Load()) / float64(b.jobs), Seconds: elapsed.Seconds(),
		Submit: latencyOf(b.lat[opSubmit]), Acquire: latencyOf(b.lat[opAcquire]),
		Heartbeat: latencyOf(b.lat[opHeartbeat]), Report: latencyOf(b.lat[opReport]),
		Checked: checkErr == nil, Check: verified,
	}
	if checkErr != nil {
		r.Check = checkErr.Error()
	}
	if elapsed > 0 {
		r.JobsPerSecond = float64(b.jobs) / elapsed.Seconds()
	}
	return r
}

func (r benchResult) table(out io.Writer) {
	fmt.Fprintf(out, "%d jobs (%s, %s) in %.2f s: %.0f jobs/s; %d workers, %d enqueuers, %d heartbeats a job; protocol %s over %s, %.2f calls a job\n\n",
		r.Jobs, r.Kind, r.Prefix, r.Seconds, r.JobsPerSecond, r.Workers, r.Enqueuers, r.Heartbeats, r.Protocol, r.HTTP, r.CallsPerJob)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OPERATION\tCOUNT\tP50 ms\tP90 ms\tP99 ms\tMAX ms\tMEAN ms\t")
	for i, l := range []benchLatency{r.Submit, r.Acquire, r.Heartbeat, r.Report} {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n", opNames[i], l.Count, l.P50, l.P90, l.P99, l.Max, l.Mean)
	}
	tw.Flush()
	fmt.Fprintf(out, "\ncheck: %s\n", r.Check)
}
