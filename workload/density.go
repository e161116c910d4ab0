package workload

// The density workload of `leaselog bench --mode density`: W workers hold L
// leases each, never reporting them, and heartbeat all of them in one call
// every renew, their calls spread evenly over the renew. It measures the
// heartbeat's latency and, over the heartbeating alone, the daemon's CPU and
// RSS (its /metrics) and the disk its store grows by once compacted.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/leaselog/leaselog/api"
)

// densityAcquirers bounds the acquires in flight while the workers take
// their leases: thousands of workers acquiring at once would only queue on
// the daemon's one writer.
const densityAcquirers = 64

// Density is one run of the density workload against a daemon.
type Density struct {
	Admin     Admin
	Worker    Worker
	Prefix    string // job ids are prefix + "-" + number, workers prefix + "-wN"
	Workers   int
	Leases    int // a worker's
	Renew     time.Duration
	Duration  time.Duration
	Enqueuers int

	heartbeats   atomic.Int64 // lease-heartbeats answered continue
	notContinued atomic.Int64 // lease-heartbeats answered anything else
	lat          []time.Duration
	latMu        sync.Mutex
}

// Counts returns the lease-heartbeats answered continue, those answered
// anything else, and the latency of the heartbeat calls.
func (d *Density) Counts() (continued, notContinued int64, calls Latency) {
	d.latMu.Lock()
	defer d.latMu.Unlock()
	return d.heartbeats.Load(), d.notContinued.Load(), latencyOf(d.lat)
}

func (d *Density) workerName(w int) string { return fmt.Sprintf("%s-w%d", d.Prefix, w) }

// Take submits W×L jobs and has every worker acquire (with start) L of
// them; it returns each worker's leases.
func (d *Density) Take(ctx context.Context) ([][]uint64, error) {
	n := d.Workers * d.Leases
	if err := SubmitBatches(ctx, d.Admin, d.Prefix, 0, n, d.Enqueuers); err != nil {
		return nil, err
	}
	held := make([][]uint64, d.Workers)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(densityAcquirers, d.Workers) {
		wg.Go(func() {
			for w := int(next.Add(1) - 1); w < d.Workers && ctx.Err() == nil; w = int(next.Add(1) - 1) {
				for len(held[w]) < d.Leases {
					gs, err := d.Worker.AcquireStart(ctx, d.workerName(w), min(d.Leases-len(held[w]), 100), acquireWait)
					if err != nil {
						cancel(fmt.Errorf("worker %s: acquire: %w", d.workerName(w), workerCallHint(err)))
						return
					}
					for _, g := range gs {
						held[w] = append(held[w], g.Lease)
					}
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return held, nil
}

// Beat heartbeats every worker's leases every renew for the duration, the
// workers' calls spread over the renew, and records each call's latency. A
// call that fails stops the run.
func (d *Density) Beat(ctx context.Context, held [][]uint64) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t0 := time.Now()
	end := t0.Add(d.Duration)
	var wg sync.WaitGroup
	for w, ids := range held {
		first := t0.Add(d.Renew * time.Duration(w) / time.Duration(len(held)))
		wg.Go(func() {
			var lat []time.Duration
			defer func() {
				d.latMu.Lock()
				d.lat = append(d.lat, lat...)
				d.latMu.Unlock()
			}()
			timer := time.NewTimer(time.Until(first))
			defer timer.Stop()
			for at := first; at.Before(end); at = at.Add(d.Renew) {
				timer.Reset(time.Until(at))
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
				st := time.Now()
				r, err := d.Worker.Heartbeat(ctx, d.workerName(w), ids)
				if err != nil {
					cancel(fmt.Errorf("worker %s: heartbeat of %d leases: %w", d.workerName(w), len(ids), err))
					return
				}
				lat = append(lat, time.Since(st))
				var ok int64
				for _, l := range r.Leases {
					if l.Directive == api.DirectiveContinue {
						ok++
					}
				}
				d.heartbeats.Add(ok)
				d.notContinued.Add(int64(len(ids)) - ok)
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// CountEvents counts the events of type typ after seq after.
func CountEvents(ctx context.Context, admin Admin, typ string, after uint64) (int, error) {
	n := 0
	q := api.EventQuery{Type: typ, After: after, Limit: api.MaxLimit}
	for {
		page, err := admin.Events(ctx, q)
		if err != nil {
			return n, fmt.Errorf("read the %s events: %w", typ, err)
		}
		n += len(page.Events)
		if page.Next == 0 {
			return n, nil
		}
		q.After = page.Next
	}
}

// SubmitBatches submits jobs lo to hi-1 of prefix (ids prefix-N, kind
// evaluation) in batches of 1,000, from enqueuers at once.
func SubmitBatches(ctx context.Context, admin Admin, prefix string, lo, hi, enqueuers int) error {
	spec, _ := json.Marshal(api.Spec{Run: "bench"})
	const size = 1000
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	next.Store(int64(lo))
	var wg sync.WaitGroup
	for range max(enqueuers, 1) {
		wg.Go(func() {
			for {
				from := int(next.Add(size) - size)
				if from >= hi || ctx.Err() != nil {
					return
				}
				to := min(from+size, hi)
				items := make([]api.Submit, 0, to-from)
				for i := from; i < to; i++ {
					items = append(items, api.Submit{ID: fmt.Sprintf("%s-%d", prefix, i), Kind: Kind, Spec: spec})
				}
				subs, err := admin.SubmitBatch(ctx, items)
				if err == nil && len(subs) != len(items) {
					err = fmt.Errorf("%d answers for %d jobs", len(subs), len(items))
				}
				for i := range subs {
					if err == nil && subs[i].Status/100 != 2 {
						err = fmt.Errorf("job %s answered status %d", items[i].ID, subs[i].Status)
					}
				}
				if err != nil {
					cancel(fmt.Errorf("submit %s-%d to %s-%d: %w", prefix, from, prefix, to-1, err))
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// DensityResult is the output of --mode density (-o json: one object).
type DensityResult struct {
	Mode            string  `json:"mode"`
	Prefix          string  `json:"prefix"`
	Workers         int     `json:"workers"`
	LeasesPerWorker int     `json:"leases_per_worker"`
	LiveLeases      int     `json:"live_leases"`
	RenewSeconds    float64 `json:"renew_seconds"`
	Seconds         float64 `json:"seconds"` // of heartbeating
	HTTP            string  `json:"http"`
	LeaseHeartbeats int64   `json:"lease_heartbeats"` // answered continue
	Heartbeat       Latency `json:"heartbeat_ms"`     // a call, all of a worker's leases
	// The daemon over the heartbeating, from its /metrics.
	CPUMicrosPerLeaseHeartbeat float64 `json:"cpu_us_per_lease_heartbeat"`
	CPUCores                   float64 `json:"cpu_cores"` // CPU seconds a second
	RSSPeakBytes               float64 `json:"rss_peak_bytes"`
	RSSEndBytes                float64 `json:"rss_end_bytes"`
	// The store's tables, compacted whole, before and after the heartbeating.
	StoreBytesBefore           int64   `json:"store_bytes_before"`
	StoreBytesAfter            int64   `json:"store_bytes_after"`
	DiskBytesPerLeaseHeartbeat float64 `json:"disk_bytes_per_lease_heartbeat"`
	// Leases lost: lease.expired events of the run, and lease-heartbeats
	// answered other than continue.
	Expired      int   `json:"expired"`
	NotContinued int64 `json:"not_continued"`
	// From a SIGKILL after the heartbeating to the restarted daemon's
	// /healthz: the store's open and the table's rebuild from its last
	// snapshot and the events after it.
	ReadyMillis float64 `json:"ready_after_sigkill_ms"`
}

func (r DensityResult) WriteTable(out io.Writer) {
	fmt.Fprintf(out, "density %s: %d workers × %d leases = %d live leases, renew %gs, heartbeating for %.1f s over %s\n\n",
		r.Prefix, r.Workers, r.LeasesPerWorker, r.LiveLeases, r.RenewSeconds, r.Seconds, r.HTTP)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OPERATION\tCOUNT\tP50 ms\tP90 ms\tP99 ms\tMAX ms\tMEAN ms\t")
	l := r.Heartbeat
	fmt.Fprintf(tw, "heartbeat\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n", l.Count, l.P50, l.P90, l.P99, l.Max, l.Mean)
	tw.Flush()
	fmt.Fprintf(out, "\nlease-heartbeats: %d; daemon CPU %.1f µs a lease-heartbeat (%.2f cores); RSS peak %.0f MB, at the end %.0f MB\n",
		r.LeaseHeartbeats, r.CPUMicrosPerLeaseHeartbeat, r.CPUCores, r.RSSPeakBytes/1e6, r.RSSEndBytes/1e6)
	fmt.Fprintf(out, "store, compacted: %d bytes before, %d after: %.1f bytes a lease-heartbeat\n",
		r.StoreBytesBefore, r.StoreBytesAfter, r.DiskBytesPerLeaseHeartbeat)
	fmt.Fprintf(out, "expired: %d leases; heartbeats not answered continue: %d\n", r.Expired, r.NotContinued)
	fmt.Fprintf(out, "ready after SIGKILL: %.0f ms\n", r.ReadyMillis)
}
