package server_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/server"
	"github.com/leaselog/leaselog/timing"
)

// BenchmarkHeartbeatHTTP: W workers, each holding one lease, heartbeat as
// fast as they can over HTTP on loopback; every heartbeat is a durable
// lease.heartbeat. Beside it, in the same run, W goroutines append one event
// per call straight to the event log (BenchmarkAppend's measure): the
// difference is the cost of HTTP, JSON and the lease service.
//
//	go test -run '^$' -bench BenchmarkHeartbeatHTTP -count 6 ./server | tee h.txt
//	benchstat -col /impl h.txt
//
// It reports heartbeats/s, and the p50 and p99 latency of a heartbeat;
// impl=http is HTTP/1.1 (api.PlainCalls), impl=h2c HTTP/2 without TLS
// (api.H2C), impl=session a worker session per worker, api.Client's default.
func BenchmarkHeartbeatHTTP(b *testing.B) {
	for _, w := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("workers=%d/impl=http", w), func(b *testing.B) { benchHeartbeatHTTP(b, w, api.PlainCalls()) })
		b.Run(fmt.Sprintf("workers=%d/impl=h2c", w), func(b *testing.B) { benchHeartbeatHTTP(b, w, api.H2C(), api.PlainCalls()) })
		b.Run(fmt.Sprintf("workers=%d/impl=session", w), func(b *testing.B) { benchHeartbeatHTTP(b, w, api.Session()) })
		b.Run(fmt.Sprintf("workers=%d/impl=append", w), func(b *testing.B) { benchAppendBaseline(b, w) })
	}
}

// daemonOnDisk starts a lease service on a durable store in a temp dir, its
// API on loopback, and a client of it.
func daemonOnDisk(b *testing.B, opts ...api.ClientOption) *api.Client {
	_, svc := leasetest.Open(b, leasetest.Disk(b.TempDir()), leasetest.Config(timing.Default()),
		leasetest.Service(func(o *lease.Options) { o.SnapshotEvery = -1 }))
	srv := server.New(svc, server.Options{Logger: zerolog.Nop()})
	ts := httptest.NewUnstartedServer(srv)
	ts.Config = server.NewHTTPServer(srv) // as the daemon serves: HTTP/1.1 and h2c
	ts.Start()
	b.Cleanup(func() {
		srv.Close()
		ts.Close()
	})
	c, err := api.NewClient(ts.URL, "", opts...)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func benchHeartbeatHTTP(b *testing.B, workers int, opts ...api.ClientOption) {
	ctx := context.Background()
	c := daemonOnDisk(b, opts...)
	leases := make([]uint64, workers)
	for i := range leases {
		id := fmt.Sprintf("j%d", i)
		if _, _, err := c.Submit(ctx, api.Submit{ID: id, Kind: "run"}); err != nil {
			b.Fatal(err)
		}
		gs, err := c.Acquire(ctx, fmt.Sprintf("w%d", i), 1, 0)
		if err != nil || len(gs) != 1 {
			b.Fatalf("acquire: %v %v", gs, err)
		}
		leases[i] = gs[0].Lease
	}
	lat := testutil.Parallel(b, workers, func(w, _ int) error {
		r, err := c.Heartbeat(ctx, fmt.Sprintf("w%d", w), leases[w:w+1])
		if err == nil && r.Leases[0].Directive != api.DirectiveContinue {
			err = fmt.Errorf("lease %d: %s", leases[w], r.Leases[0].Directive)
		}
		return err
	})
	report(b, lat, "heartbeats/s")
}

func benchAppendBaseline(b *testing.B, workers int) {
	log, err := eventlog.Open(b.TempDir(), eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	lat := testutil.Parallel(b, workers, func(w, _ int) error {
		ev := [1]event.Event{{Type: event.TypeHeartbeat, Time: time.Now().UnixNano(), Job: fmt.Sprintf("j%d", w), Lease: uint64(w + 1), Worker: fmt.Sprintf("w%d", w)}}
		return log.Append(ev[:])
	})
	report(b, lat, "events/s")
}

func report(b *testing.B, lat []time.Duration, unit string) {
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkLifecycleHTTP runs whole jobs over HTTP on loopback: executors
// submit jobs while W workers each loop acquiring one, starting it,
// heartbeating it three times and reporting it — seven durable events per
// job. Beside it, in the same run, W goroutines append the same seven events
// per job straight to the log, one durable append each: the rate the storage
// allows.
//
// impl=combined runs the same jobs with the calls that save round trips
// (rounds_bench_test.go): submits in batches, an acquire that starts its job,
// and a report that takes the next — three heartbeats and one report a job,
// where impl=http makes seven calls. impl=h2c makes the seven calls of
// impl=http over HTTP/2 without TLS (api.H2C) rather than HTTP/1.1.
// impl=session makes the calls of impl=combined, the workers' over a worker
// session each (api.Session), the submits over HTTP/1.1.
//
//	go test -run '^$' -bench BenchmarkLifecycleHTTP -count 6 ./server | tee l.txt
//	benchstat -col /impl l.txt
func BenchmarkLifecycleHTTP(b *testing.B) {
	for _, w := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("workers=%d/impl=http", w), func(b *testing.B) { benchLifecycleHTTP(b, w, false, api.PlainCalls()) })
		b.Run(fmt.Sprintf("workers=%d/impl=h2c", w), func(b *testing.B) { benchLifecycleHTTP(b, w, false, api.H2C(), api.PlainCalls()) })
		b.Run(fmt.Sprintf("workers=%d/impl=combined", w), func(b *testing.B) { benchLifecycleHTTP(b, w, true, api.PlainCalls()) })
		b.Run(fmt.Sprintf("workers=%d/impl=session", w), func(b *testing.B) { benchLifecycleHTTP(b, w, true, api.Session()) })
		b.Run(fmt.Sprintf("workers=%d/impl=append", w), func(b *testing.B) { benchLifecycleAppend(b, w) })
	}
}

// benchLifecycleHTTP runs the jobs with the classic calls, or, if combined,
// with the calls that save round trips.
func benchLifecycleHTTP(b *testing.B, workers int, combined bool, opts ...api.ClientOption) {
	c := daemonOnDisk(b, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		submitted, done atomic.Int64
		mu              sync.Mutex
		beats           []time.Duration
		wg              sync.WaitGroup
		errs            = make(chan error, workers+4)
	)
	b.ResetTimer()
	for e := 0; e < 1+workers/8; e++ { // executors, so that the queue never runs dry
		wg.Add(1)
		go func() {
			defer wg.Done()
			if combined {
				if err := submitBatches(ctx, c, &submitted, int64(b.N)); err != nil {
					errs <- err
				}
				return
			}
			for i := submitted.Add(1) - 1; i < int64(b.N); i = submitted.Add(1) - 1 {
				if _, _, err := c.Submit(ctx, api.Submit{ID: fmt.Sprintf("j%d", i), Kind: "run"}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := lifecycleWorker
			if combined {
				run = lifecycleWorkerCombined
			}
			if err := run(ctx, c, fmt.Sprintf("w%d", g), &beats, &mu, func() bool {
				if done.Add(1) == int64(b.N) {
					cancel() // the last job: the others' long-polls end
				}
				return ctx.Err() == nil
			}); err != nil && ctx.Err() == nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	slices.Sort(beats)
	b.ReportMetric(float64(beats[len(beats)/2].Microseconds())/1000, "heartbeat-p50-ms")
	b.ReportMetric(float64(beats[len(beats)*99/100].Microseconds())/1000, "heartbeat-p99-ms")
}

// beatThrice sends the workload's three heartbeats on lease and adds their
// latencies to beats.
func beatThrice(ctx context.Context, c *api.Client, worker string, lease uint64, beats *[]time.Duration, mu *sync.Mutex) error {
	var mine [3]time.Duration
	for h := range mine {
		start := time.Now()
		if _, err := c.Heartbeat(ctx, worker, []uint64{lease}); err != nil {
			return err
		}
		mine[h] = time.Since(start)
	}
	mu.Lock()
	*beats = append(*beats, mine[:]...)
	mu.Unlock()
	return nil
}

// lifecycleWorker takes jobs one at a time and runs each through start,
// three heartbeats and a report, until finished says to stop.
func lifecycleWorker(ctx context.Context, c *api.Client, worker string, beats *[]time.Duration, mu *sync.Mutex, finished func() bool) error {
	for {
		gs, err := c.Acquire(ctx, worker, 1, time.Second)
		if err != nil {
			return err
		}
		for _, g := range gs {
			if _, err := c.Start(ctx, worker, g.Lease); err != nil {
				return err
			}
			if err := beatThrice(ctx, c, worker, g.Lease, beats, mu); err != nil {
				return err
			}
			if _, err := c.Report(ctx, g.Lease, api.Report{Worker: worker, Outcome: "succeeded"}); err != nil {
				return err
			}
			if !finished() {
				return nil
			}
		}
	}
}

func benchLifecycleAppend(b *testing.B, workers int) {
	log, err := eventlog.Open(b.TempDir(), eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	types := []event.Type{event.TypeQueued, event.TypeAcquired, event.TypeRunning,
		event.TypeHeartbeat, event.TypeHeartbeat, event.TypeHeartbeat, event.TypeReported}
	testutil.Parallel(b, workers, func(g, i int) error {
		job, worker := fmt.Sprintf("j%d", i), fmt.Sprintf("w%d", g)
		for _, t := range types {
			ev := [1]event.Event{{Type: t, Time: time.Now().UnixNano(), Job: job, Worker: worker, Lease: uint64(i + 1)}}
			if t == event.TypeQueued {
				ev[0].Kind, ev[0].Worker = event.KindRun, ""
			}
			if t == event.TypeReported {
				ev[0].Outcome = event.OutcomeSucceeded
			}
			if err := log.Append(ev[:]); err != nil {
				return err
			}
		}
		return nil
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
