package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// heapDir, when set, is where BenchmarkDaemonSubmit writes a heap profile
// of the daemon every 100,000 jobs (heap-NNNNNN.prof) and once they are all
// submitted: what holds the memory while a queue of jobs comes in.
var heapDir = flag.String("heapdir", "", "BenchmarkDaemonSubmit: write heap profiles to this directory")

// BenchmarkDaemonSubmit starts a daemon in this process as serve does
// (startDaemon, the default configuration but for no local worker) and
// submits jobs to it over HTTP in batches of 1,000 from 4 goroutines, each
// answer read and dropped. The batches are those of `leaselog bench --mode
// million` (workload.SubmitBatches), but written by hand into a buffer each
// goroutine reuses: the client shares the process, and the Go client's
// encoding would add its own garbage to the daemon's figures. It reports the bytes the process
// allocated per job submitted, the Go heap in use at most while they come
// in (sampled every 50 ms), and after they are in and a GC: the daemon's
// memory, as the client's side is a buffer per goroutine.
func BenchmarkDaemonSubmit(b *testing.B) {
	for _, n := range []int{100_000, 300_000, 1_000_000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			for b.Loop() {
				benchDaemonSubmit(b, n)
			}
		})
	}
}

func benchDaemonSubmit(b *testing.B, n int) {
	cfg := DefaultConfig()
	cfg.Store.Dir = b.TempDir()
	cfg.Server.Listen = "127.0.0.1:0"
	zero := 0
	cfg.Plugins.Executor.LocalCapacity = &zero
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	d, err := startDaemon(ctx, cfg, zerolog.Nop(), startOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := d.stop(); err != nil {
			b.Error(err)
		}
	}()
	url := d.url() + "/v1/jobs/batch"

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stop := make(chan struct{})
	peak := sampleHeap(stop)

	const size, enqueuers = 1000, 4
	var next, done atomic.Int64
	var profiled sync.Mutex // one profile at a time, in order
	errs := make(chan error, enqueuers)
	var wg sync.WaitGroup
	for range enqueuers {
		wg.Go(func() {
			var body bytes.Buffer
			for {
				from := int(next.Add(size) - size)
				if from >= n {
					errs <- nil
					return
				}
				to := min(from+size, n)
				body.Reset()
				body.WriteString(`{"jobs":[`)
				for i := from; i < to; i++ {
					if i > from {
						body.WriteByte(',')
					}
					fmt.Fprintf(&body, `{"id":"bench-%d","kind":"run","spec":{"run":"bench"}}`, i)
				}
				body.WriteString(`]}`)
				if err := postBatch(url, body.Bytes()); err != nil {
					errs <- fmt.Errorf("jobs %d to %d: %w", from, to-1, err)
					return
				}
				if got := done.Add(int64(to - from)); *heapDir != "" && got%100_000 == 0 {
					profiled.Lock()
					err := writeHeapProfile(fmt.Sprintf("heap-%06d.prof", got))
					profiled.Unlock()
					if err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	close(stop)
	inuse, sys := peak()

	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	runtime.GC()
	var live runtime.MemStats
	runtime.ReadMemStats(&live)
	if *heapDir != "" {
		if err := writeHeapProfile("heap-end.prof"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(n), "B/job")
	b.ReportMetric(float64(inuse)/1e6, "MB-heap-peak")
	b.ReportMetric(float64(sys)/1e6, "MB-from-OS-peak")
	b.ReportMetric(float64(live.HeapInuse)/1e6, "MB-heap-after")
}

// postBatch posts one batch and checks that it was answered 200.
func postBatch(url string, body []byte) error {
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// sampleHeap samples the Go heap in use, and what the runtime holds from
// the OS (less what it returned), every 50 ms until stop is closed; the
// function it returns gives their peaks.
func sampleHeap(stop <-chan struct{}) func() (inuse, sys uint64) {
	var inuse, sys uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			inuse, sys = max(inuse, m.HeapInuse), max(sys, m.Sys-m.HeapReleased)
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() (uint64, uint64) {
		<-done
		return inuse, sys
	}
}

// writeHeapProfile writes the heap profile to name in *heapDir.
func writeHeapProfile(name string) error {
	f, err := os.Create(filepath.Join(*heapDir, name))
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
