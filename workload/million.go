package workload

// The queue workload of `leaselog bench --mode million`: N jobs submitted in
// batches of 1,000 and left queued. It measures the daemon's RSS while and
// after they are submitted, a page of 100 jobs, an acquire with N queued
// beside one with 1,000 queued, and how soon the daemon answers again after
// a SIGKILL.

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/leaselog/leaselog/api"
)

// The samples of the million workload: acquires (each reported at once, so
// that its job ends) and pages, per measure.
const (
	MillionAcquires = 50
	MillionPages    = 20
	MillionSmall    = 1000 // the queue an acquire is compared with
)

// Million is one run of the queue workload against a daemon.
type Million struct {
	Admin     Admin
	Worker    Worker
	Prefix    string
	Jobs      int
	Enqueuers int
}

// Acquires takes MillionAcquires queued jobs one at a time, each acquire
// (with start) timed, and reports each succeeded.
func (m *Million) Acquires(ctx context.Context) (Latency, error) {
	worker := m.Prefix + "-w0"
	var lat []time.Duration
	for range MillionAcquires {
		st := time.Now()
		gs, err := m.Worker.AcquireStart(ctx, worker, 1, 0)
		if err != nil {
			return Latency{}, fmt.Errorf("worker %s: acquire: %w", worker, workerCallHint(err))
		}
		lat = append(lat, time.Since(st))
		if len(gs) != 1 {
			return Latency{}, fmt.Errorf("worker %s: acquire with jobs queued granted %d leases, want 1", worker, len(gs))
		}
		rep := api.Report{Worker: worker, Outcome: "succeeded"}
		if _, err := m.Worker.Report(ctx, gs[0].Lease, rep); err != nil {
			return Latency{}, fmt.Errorf("worker %s: report lease %d: %w", worker, gs[0].Lease, err)
		}
	}
	return latencyOf(lat), nil
}

// PageLister reads one page of jobs; *api.Client is one.
type PageLister interface {
	JobsPage(ctx context.Context, q api.JobQuery) (api.Jobs, error)
}

// Pages times MillionPages reads of the first page of 100 jobs of q.
func Pages(ctx context.Context, c PageLister, q api.JobQuery) (Latency, error) {
	q.Limit = 100
	var lat []time.Duration
	for range MillionPages {
		st := time.Now()
		js, err := c.JobsPage(ctx, q)
		if err != nil {
			return Latency{}, fmt.Errorf("a page of jobs (state %q): %w", q.State, err)
		}
		lat = append(lat, time.Since(st))
		if len(js.Jobs) != 100 {
			return Latency{}, fmt.Errorf("a page of 100 jobs (state %q) held %d", q.State, len(js.Jobs))
		}
	}
	return latencyOf(lat), nil
}

// MillionResult is the output of --mode million (-o json: one object).
type MillionResult struct {
	Mode          string  `json:"mode"`
	Prefix        string  `json:"prefix"`
	Jobs          int     `json:"jobs"`
	HTTP          string  `json:"http"`
	SubmitSeconds float64 `json:"submit_seconds"`
	JobsPerSecond float64 `json:"submit_jobs_per_second"`
	// The daemon's RSS (its /metrics): at the start, the most while the
	// jobs were submitted, after, and after a SIGKILL and a restart.
	RSSStartBytes   float64 `json:"rss_start_bytes"`
	RSSPeakBytes    float64 `json:"rss_peak_bytes"`
	RSSAfterBytes   float64 `json:"rss_after_bytes"`
	RSSRestartBytes float64 `json:"rss_restart_bytes"`
	// The first page of 100 queued jobs, and of 100 jobs of any state.
	PageQueued Latency `json:"page_queued_ms"`
	PageAll    Latency `json:"page_all_ms"`
	// An acquire (with start) with 1,000 queued, with N queued, and with N
	// queued after the restart.
	AcquireSmall   Latency `json:"acquire_1000_queued_ms"`
	AcquireMillion Latency `json:"acquire_n_queued_ms"`
	AcquireRestart Latency `json:"acquire_after_restart_ms"`
	// From the restart after a SIGKILL to the daemon's first answer of /healthz.
	ReadyMillis float64 `json:"ready_after_sigkill_ms"`
}

func (r MillionResult) WriteTable(out io.Writer) {
	fmt.Fprintf(out, "million %s: %d jobs queued in batches of 1,000 in %.1f s (%.0f jobs/s) over %s\n\n",
		r.Prefix, r.Jobs, r.SubmitSeconds, r.JobsPerSecond, r.HTTP)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OPERATION\tCOUNT\tP50 ms\tP90 ms\tP99 ms\tMAX ms\tMEAN ms\t")
	for _, row := range []struct {
		name string
		l    Latency
	}{
		{"page of 100 queued", r.PageQueued}, {"page of 100", r.PageAll},
		{"acquire, 1,000 queued", r.AcquireSmall}, {"acquire, N queued", r.AcquireMillion}, {"acquire, after restart", r.AcquireRestart},
	} {
		l := row.l
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n", row.name, l.Count, l.P50, l.P90, l.P99, l.Max, l.Mean)
	}
	tw.Flush()
	fmt.Fprintf(out, "\nRSS: %.0f MB at the start, %.0f MB at most while submitting, %.0f MB after, %.0f MB after a SIGKILL and restart\n",
		r.RSSStartBytes/1e6, r.RSSPeakBytes/1e6, r.RSSAfterBytes/1e6, r.RSSRestartBytes/1e6)
	fmt.Fprintf(out, "ready %.0f ms after the restart that followed a SIGKILL\n", r.ReadyMillis)
}
