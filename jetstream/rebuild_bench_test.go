package jetstream

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/leaselog/leaselog/event"
)

// BenchmarkCacheRebuild: a deleted cache rebuilt from a stream of 20,000
// batches (one submit each) on one in-process NATS server: what a daemon
// whose cache is lost pays before it can lead or stand by.
//
//	go test ./jetstream -run '^$' -bench CacheRebuild -benchtime 1x -count 3
func BenchmarkCacheRebuild(b *testing.B) {
	const batches = 20_000
	ns := runServer(b)
	open(b, b.TempDir(), 1, ns).Close() // creates the stream
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	for i := range batches {
		e := event.Event{Seq: uint64(i + 1), Type: event.TypeQueued, ID: ulid.Make(), Time: start.UnixNano(),
			Job: fmt.Sprintf("job-%d", i), Kind: event.KindRun, Spec: []byte(`{"cmd":"make test"}`)}
		if _, err := js.PublishAsync("leaselog.T", encodeBatch([]event.Event{e})); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("the stream's batches not all acknowledged within a minute")
	}
	b.ResetTimer()
	for range b.N {
		s := open(b, b.TempDir(), 1, ns)
		if got := s.Log().LastSeq(); got != batches {
			b.Fatalf("the rebuilt cache ends at seq %d, want %d", got, batches)
		}
		b.StopTimer()
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(batches*b.N)/b.Elapsed().Seconds(), "batches/s")
}
