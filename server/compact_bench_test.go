package server_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/internal/testkit/synth"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/server"
	"github.com/leaselog/leaselog/timing"
)

// BenchmarkHeartbeatCompaction: the cost of compaction to a running daemon's
// heartbeats. The daemon's store holds 100,000 heartbeats of 100 jobs that
// ended (synth.Fixture, as BenchmarkCompact's); 16 workers, each holding
// one lease, heartbeat over HTTP as fast as they can, while the compactor
// works through that backlog as the daemon runs it (compact=on:
// RunCompaction, its passes paced to a tenth of a CPU) or does nothing
// (compact=off). It reports heartbeats/s, their p50 and p99,
// and the heartbeats compacted a second meanwhile (0 with compact=off; the
// backlog outlasts a run of a second or so).
//
//	go test -run '^$' -bench BenchmarkHeartbeatCompaction -count 6 ./server | tee c.txt
//	benchstat -col /compact c.txt
func BenchmarkHeartbeatCompaction(b *testing.B) {
	shape := synth.Shape{Wave: 100, Heartbeats: 1000, Workers: 10, Renew: 10 * time.Second}
	fixture, err := synth.Fixture(shape, 1, false)
	if err != nil {
		b.Fatal(err)
	}
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "off", true: "on"}[on]
		b.Run("workers=16/compact="+name, func(b *testing.B) { benchHeartbeatCompaction(b, fixture, 16, on) })
	}
}

func benchHeartbeatCompaction(b *testing.B, fixture string, workers int, compact bool) {
	ctx := context.Background()
	dir := filepath.Join(b.TempDir(), "data")
	if err := synth.CopyStore(fixture, dir); err != nil {
		b.Fatal(err)
	}
	// The daemon's own clock, now: the backlog's jobs ended long ago.
	_, svc := leasetest.Open(b, leasetest.Disk(dir), leasetest.Config(timing.Default()),
		leasetest.Service(func(o *lease.Options) { o.SnapshotEvery, o.HeartbeatRetention = -1, time.Second }))
	srv := server.New(svc, server.Options{Logger: zerolog.Nop()})
	ts := httptest.NewUnstartedServer(srv)
	ts.Config = server.NewHTTPServer(srv)
	ts.Start()
	b.Cleanup(func() {
		srv.Close()
		ts.Close()
	})
	c, err := api.NewClient(ts.URL, "")
	if err != nil {
		b.Fatal(err)
	}
	leases := make([]uint64, workers)
	for i := range leases {
		id := fmt.Sprintf("live-%d", i)
		if _, _, err := c.Submit(ctx, api.Submit{ID: id, Kind: "run"}); err != nil {
			b.Fatal(err)
		}
		gs, err := c.Acquire(ctx, fmt.Sprintf("w%d", i), 1, 0)
		if err != nil || len(gs) != 1 {
			b.Fatalf("acquire: %v %v", gs, err)
		}
		leases[i] = gs[0].Lease
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if compact {
		wg.Add(1)
		go func() { // as the daemon runs it
			defer wg.Done()
			if err := svc.RunCompaction(runCtx, nil); err != nil {
				b.Error(err)
			}
		}()
	}
	start, at := svc.CompactionTotals().Heartbeats, time.Now()
	lat := testutil.Parallel(b, workers, func(w, _ int) error {
		r, err := c.Heartbeat(ctx, fmt.Sprintf("w%d", w), leases[w:w+1])
		if err == nil && r.Leases[0].Directive != api.DirectiveContinue {
			err = fmt.Errorf("lease %d: %s", leases[w], r.Leases[0].Directive)
		}
		return err
	})
	compacted := float64(svc.CompactionTotals().Heartbeats-start) / time.Since(at).Seconds()
	stop()
	wg.Wait()
	report(b, lat, "heartbeats/s")
	b.ReportMetric(compacted, "compacted/s")
}
