package jetstream

import (
	"fmt"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
)

// BenchmarkDurableAppend: the durable append of one event a batch (a
// command's usual batch), by 1 and 16 concurrent appenders, on Pebble alone
// (fsync), on a stream of one replica and on one of three (an in-process
// three-node cluster on this machine), the cache fsynced beside it.
//
//	go test ./jetstream -run '^$' -bench DurableAppend -benchtime 2000x
func BenchmarkDurableAppend(b *testing.B) {
	for _, engine := range []string{"pebble", "jetstream-r1", "jetstream-r3"} {
		for _, appenders := range []int{1, 16} {
			b.Run(fmt.Sprintf("engine=%s/appenders=%d", engine, appenders), func(b *testing.B) {
				log := benchLog(b, engine)
				b.ResetTimer()
				var wg sync.WaitGroup
				for a := range appenders {
					wg.Go(func() {
						for i := a; i < b.N; i += appenders {
							e := event.Event{Type: event.TypeQueued, ID: ulid.Make(), Time: start.UnixNano(),
								Job: fmt.Sprintf("job-%d", i), Kind: event.KindRun, Spec: []byte(`{"cmd":"make test"}`)}
							if err := log.Append([]event.Event{e}); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
			})
		}
	}
}

func benchLog(b *testing.B, engine string) *eventlog.Log {
	switch engine {
	case "pebble":
		log, err := eventlog.Open(b.TempDir(), eventlog.Options{Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { log.Close() })
		return log
	case "jetstream-r1":
		s := open(b, b.TempDir(), 1, runServer(b))
		b.Cleanup(func() { s.Close() })
		return s.Log()
	default:
		s := open(b, b.TempDir(), 3, runCluster(b, 3)...)
		b.Cleanup(func() { s.Close() })
		return s.Log()
	}
}
