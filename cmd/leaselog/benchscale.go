package main

// The scale modes of `leaselog bench`: --mode density (many live leases
// heartbeated) and --mode million (many jobs queued), each on a daemon of
// its own (benchdaemon.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/workload"
)

// The bench's modes.
const (
	modeLifecycle = "lifecycle"
	modeDensity   = "density"
	modeMillion   = "million"
)

// scaleFlags are the flags of the scale modes.
type scaleFlags struct {
	mode     string
	leases   int           // density: a worker's leases
	renew    time.Duration // density: the daemon's renew_seconds and the workers' heartbeat period
	duration time.Duration // density: how long the workers heartbeat
	store    string        // the daemon's data directory ("": a temporary one, removed after)
	exe      string        // the leaselog binary the daemon runs ("": this one)
}

func (s *scaleFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.mode, "mode", modeLifecycle, "lifecycle (the workload above, on --server), density or million (see above: on a daemon of the bench's own)")
	cmd.Flags().IntVar(&s.leases, "leases", 100, "density: leases each worker holds")
	cmd.Flags().DurationVar(&s.renew, "renew", 10*time.Second, "density: the daemon's renew_seconds, and how often each worker heartbeats its leases")
	cmd.Flags().DurationVar(&s.duration, "duration", 5*time.Minute, "density: how long the workers heartbeat")
	cmd.Flags().StringVar(&s.store, "store", "", "density and million: the data directory of the bench's daemon, new or empty, kept after (default: a temporary directory, removed after)")
	cmd.Flags().StringVar(&s.exe, "daemon-binary", "", "density and million: the leaselog binary the bench's daemon runs (default: this one)")
}

// runScale runs a scale mode and prints its result.
func (m *Main) runScale(cmd *cobra.Command, s scaleFlags, f clientFlags, workers, jobs, enqueuers int, opts []api.ClientOption, http string) (err error) {
	switch {
	case f.server != "":
		return fmt.Errorf("bench: --mode %s runs a daemon of its own: --server is for --mode lifecycle", s.mode)
	case s.mode == modeDensity && (s.leases < 1 || s.leases > 10_000):
		return fmt.Errorf("bench: --leases %d: want 1 to 10000 (a heartbeat's limit)", s.leases)
	case s.mode == modeDensity && (s.renew < 10*time.Millisecond || s.duration < s.renew):
		return fmt.Errorf("bench: --renew %v, --duration %v: want a renew of 10ms or more, and a duration of one renew or more", s.renew, s.duration)
	}
	if enqueuers == 0 {
		enqueuers = 4
	}
	exe := s.exe
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("bench: this binary's path, for the daemon: %w", err)
		}
	}
	dir := s.store
	if dir == "" {
		tmp, err := os.MkdirTemp("", "leaselog-bench-")
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer os.RemoveAll(tmp)
		dir = filepath.Join(tmp, "data")
	} else if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("bench: --store %s: holds files already: give a new or empty directory", dir)
	}
	renew := s.renew
	if s.mode == modeMillion {
		renew = 10 * time.Second
	}
	d, err := newScaleDaemon(exe, dir, renew, opts)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer func() { err = errors.Join(err, d.kill()) }()
	ctx := cmd.Context()
	if _, err := d.start(ctx); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	prefix := "bench-" + ulid.Make().String()
	var out any
	switch s.mode {
	case modeDensity:
		dens := &workload.Density{Admin: d.client, Worker: d.client, Prefix: prefix, Workers: workers, Leases: s.leases,
			Renew: s.renew, Duration: s.duration, Enqueuers: enqueuers}
		res, err := runDensity(ctx, d, dens)
		if err != nil {
			return fmt.Errorf("bench %s: %w", prefix, err)
		}
		res.HTTP = http
		out = res
	case modeMillion:
		mil := &workload.Million{Admin: d.client, Worker: d.client, Prefix: prefix, Jobs: jobs, Enqueuers: enqueuers}
		res, err := runMillion(ctx, d, mil)
		if err != nil {
			return fmt.Errorf("bench %s: %w", prefix, err)
		}
		res.HTTP = http
		out = res
	default:
		return fmt.Errorf("bench: --mode %q: want lifecycle, density or million", s.mode)
	}
	if f.output == "json" {
		b, _ := json.Marshal(out)
		fmt.Fprintln(cmd.OutOrStdout(), string(b))
		return nil
	}
	switch r := out.(type) {
	case workload.DensityResult:
		r.WriteTable(cmd.OutOrStdout())
	case workload.MillionResult:
		r.WriteTable(cmd.OutOrStdout())
	}
	return nil
}

// runDensity takes the leases, compacts the store with the daemon stopped,
// heartbeats for the duration on the restarted daemon, SIGKILLs it and times
// its restart (the events since its last snapshot replayed), and compacts
// again.
func runDensity(ctx context.Context, d *scaleDaemon, dens *workload.Density) (workload.DensityResult, error) {
	r := workload.DensityResult{Mode: modeDensity, Prefix: dens.Prefix, Workers: dens.Workers, LeasesPerWorker: dens.Leases,
		LiveLeases: dens.Workers * dens.Leases, RenewSeconds: dens.Renew.Seconds()}
	held, err := dens.Take(ctx)
	if err != nil {
		return r, err
	}
	if err := d.stop(); err != nil {
		return r, err
	}
	if r.StoreBytesBefore, err = d.compactedSize(ctx); err != nil {
		return r, err
	}
	if _, err := d.start(ctx); err != nil {
		return r, err
	}
	m0, err := d.metrics(ctx)
	if err != nil {
		return r, err
	}
	stop := make(chan struct{})
	peak := d.sampleRSS(ctx, time.Second, stop)
	t0 := time.Now()
	err = dens.Beat(ctx, held)
	r.Seconds = time.Since(t0).Seconds()
	close(stop)
	if r.RSSPeakBytes, _ = peak(); err != nil {
		return r, err
	}
	m1, err := d.metrics(ctx)
	if err != nil {
		return r, err
	}
	r.RSSEndBytes = m1.RSS
	r.RSSPeakBytes = max(r.RSSPeakBytes, m1.RSS)
	r.LeaseHeartbeats, r.NotContinued, r.Heartbeat = dens.Counts()
	if r.LeaseHeartbeats > 0 {
		r.CPUMicrosPerLeaseHeartbeat = (m1.CPUSeconds - m0.CPUSeconds) * 1e6 / float64(r.LeaseHeartbeats)
	}
	r.CPUCores = (m1.CPUSeconds - m0.CPUSeconds) / r.Seconds
	if r.Expired, err = workload.CountEvents(ctx, dens.Admin, "lease.expired", 0); err != nil {
		return r, err
	}
	if r.ReadyMillis, err = d.readyAfterKill(ctx); err != nil {
		return r, err
	}
	if err := d.stop(); err != nil {
		return r, err
	}
	if r.StoreBytesAfter, err = d.compactedSize(ctx); err != nil {
		return r, err
	}
	if r.LeaseHeartbeats > 0 {
		r.DiskBytesPerLeaseHeartbeat = float64(r.StoreBytesAfter-r.StoreBytesBefore) / float64(r.LeaseHeartbeats)
	}
	return r, nil
}

// runMillion measures an acquire with 1,000 queued, submits the rest of the
// N jobs, measures RSS, pages and acquires with them queued, then SIGKILLs
// the daemon and times its restart.
func runMillion(ctx context.Context, d *scaleDaemon, mil *workload.Million) (workload.MillionResult, error) {
	r := workload.MillionResult{Mode: modeMillion, Prefix: mil.Prefix, Jobs: mil.Jobs}
	m0, err := d.metrics(ctx)
	if err != nil {
		return r, err
	}
	r.RSSStartBytes = m0.RSS
	small := min(workload.MillionSmall, mil.Jobs)
	if err := workload.SubmitBatches(ctx, mil.Admin, mil.Prefix, 0, small, 1); err != nil {
		return r, err
	}
	if r.AcquireSmall, err = mil.Acquires(ctx); err != nil {
		return r, err
	}
	stop := make(chan struct{})
	peak := d.sampleRSS(ctx, 250*time.Millisecond, stop)
	t0 := time.Now()
	err = workload.SubmitBatches(ctx, mil.Admin, mil.Prefix, small, mil.Jobs, mil.Enqueuers)
	r.SubmitSeconds = time.Since(t0).Seconds()
	close(stop)
	if r.RSSPeakBytes, _ = peak(); err != nil {
		return r, err
	}
	r.JobsPerSecond = float64(mil.Jobs-small) / r.SubmitSeconds
	m1, err := d.metrics(ctx)
	if err != nil {
		return r, err
	}
	r.RSSAfterBytes = m1.RSS
	r.RSSPeakBytes = max(r.RSSPeakBytes, m1.RSS)
	if r.PageQueued, err = workload.Pages(ctx, d.client, api.JobQuery{State: "queued"}); err != nil {
		return r, err
	}
	if r.PageAll, err = workload.Pages(ctx, d.client, api.JobQuery{}); err != nil {
		return r, err
	}
	if r.AcquireMillion, err = mil.Acquires(ctx); err != nil {
		return r, err
	}
	if r.ReadyMillis, err = d.readyAfterKill(ctx); err != nil {
		return r, err
	}
	if r.AcquireRestart, err = mil.Acquires(ctx); err != nil {
		return r, err
	}
	m2, err := d.metrics(ctx)
	if err != nil {
		return r, err
	}
	r.RSSRestartBytes = m2.RSS
	return r, nil
}
