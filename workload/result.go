package workload

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// Latency is one operation's latencies, in milliseconds: nearest-rank
// percentiles over all the run's samples.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
}

// latencyOf sorts the samples and takes nearest-rank percentiles.
func latencyOf(s []time.Duration) Latency {
	if len(s) == 0 {
		return Latency{}
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
	return Latency{Count: len(s), P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: ms(s[len(s)-1]), Mean: ms(sum / time.Duration(len(s)))}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Result is what a run measured and what its check found; `leaselog bench
// -o json` prints it as one object.
type Result struct {
	Prefix        string  `json:"prefix"`
	Kind          string  `json:"kind"`
	Jobs          int     `json:"jobs"`
	Workers       int     `json:"workers"`
	Enqueuers     int     `json:"enqueuers"`
	Heartbeats    int     `json:"heartbeats"`
	Protocol      string  `json:"protocol"`
	HTTP          string  `json:"http"`            // http1 or h2c, +session if the workers' calls used sessions
	Batch         int     `json:"batch,omitempty"` // jobs a submit call
	CallsPerJob   float64 `json:"calls_per_job"`   // as made, empty long polls too
	Seconds       float64 `json:"seconds"`         // from the first submit to the last accepted report
	JobsPerSecond float64 `json:"jobs_per_second"`
	Submit        Latency `json:"submit_ms"`
	Acquire       Latency `json:"acquire_ms"`
	Heartbeat     Latency `json:"heartbeat_ms"`
	Report        Latency `json:"report_ms"`
	Checked       bool    `json:"checked"` // every job reported exactly once
	Check         string  `json:"check"`   // what the check found
}

func (b *bench) result(elapsed time.Duration, verified string, checkErr error) Result {
	r := Result{
		Prefix: b.Prefix, Kind: Kind, Jobs: b.Jobs, Workers: b.Workers, Enqueuers: b.Enqueuers, Heartbeats: b.Heartbeats,
		Protocol: b.Protocol.String(), Batch: b.Protocol.Batch, HTTP: b.HTTP,
		CallsPerJob: float64(b.calls.Load()) / float64(b.Jobs), Seconds: elapsed.Seconds(),
		Submit: latencyOf(b.lat[opSubmit]), Acquire: latencyOf(b.lat[opAcquire]),
		Heartbeat: latencyOf(b.lat[opHeartbeat]), Report: latencyOf(b.lat[opReport]),
		Checked: checkErr == nil, Check: verified,
	}
	if checkErr != nil {
		r.Check = checkErr.Error()
	}
	if elapsed > 0 {
		r.JobsPerSecond = float64(b.Jobs) / elapsed.Seconds()
	}
	return r
}

// WriteTable writes the result for people: a line of what ran, a table of
// the latencies, and the check.
func (r Result) WriteTable(out io.Writer) {
	fmt.Fprintf(out, "%d jobs (%s, %s) in %.2f s: %.0f jobs/s; %d workers, %d enqueuers, %d heartbeats a job; protocol %s over %s, %.2f calls a job\n\n",
		r.Jobs, r.Kind, r.Prefix, r.Seconds, r.JobsPerSecond, r.Workers, r.Enqueuers, r.Heartbeats, r.Protocol, r.HTTP, r.CallsPerJob)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OPERATION\tCOUNT\tP50 ms\tP90 ms\tP99 ms\tMAX ms\tMEAN ms\t")
	for i, l := range []Latency{r.Submit, r.Acquire, r.Heartbeat, r.Report} {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n", opNames[i], l.Count, l.P50, l.P90, l.P99, l.Max, l.Mean)
	}
	tw.Flush()
	fmt.Fprintf(out, "\ncheck: %s\n", r.Check)
}
