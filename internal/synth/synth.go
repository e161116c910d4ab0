// Package synth writes synthetic but legal lease logs, for benchmarks: waves
// of jobs that are submitted, acquired, started, heartbeated and reported, as
// a busy daemon's log would hold them.
package synth

import (
	"fmt"

	"github.com/leaselog/leaselog/eventlog"
)

// Shape says what a synthetic log holds.
type Shape struct {
	Wave       int // jobs in flight at once
	Heartbeats int // heartbeats per lease
	Workers    int
}

// Default is the shape the benchmarks use: 8 events per job.
var Default = Shape{Wave: 100, Heartbeats: 4, Workers: 64}

// Events calls emit with batches of legal events, numbered from first, until
// at least n events have been emitted. Events are built for emit to append;
// the batch is reused after emit returns.
func (s Shape) Events(first uint64, n int, emit func([]eventlog.Event) error) error {
	seq := first
	var batch []eventlog.Event
	add := func(e eventlog.Event) {
		e.Seq = seq
		e.Time = 1_767_225_600_000_000_000 + int64(seq)*1_000_000
		if e.Type == eventlog.TypeAcquired {
			e.Lease = seq
		}
		seq++
		batch = append(batch, e)
	}
	leases := make([]uint64, s.Wave)
	for wave := 0; int(seq-first) < n; wave++ {
		batch = batch[:0]
		job := func(i int) string { return fmt.Sprintf("job-%d-%d", wave, i) }
		worker := func(i int) string { return fmt.Sprintf("worker-%d", i%s.Workers) }
		for i := 0; i < s.Wave; i++ {
			add(eventlog.Event{Type: eventlog.TypeQueued, Job: job(i), Kind: eventlog.KindEvaluation, Spec: []byte(`{"run":"make eval"}`)})
		}
		for i := 0; i < s.Wave; i++ {
			add(eventlog.Event{Type: eventlog.TypeAcquired, Job: job(i), Worker: worker(i)})
			leases[i] = seq - 1
		}
		for i := 0; i < s.Wave; i++ {
			add(eventlog.Event{Type: eventlog.TypeRunning, Job: job(i), Lease: leases[i], Worker: worker(i)})
		}
		for h := 0; h < s.Heartbeats; h++ {
			for i := 0; i < s.Wave; i++ {
				add(eventlog.Event{Type: eventlog.TypeHeartbeat, Job: job(i), Lease: leases[i], Worker: worker(i)})
			}
		}
		for i := 0; i < s.Wave; i++ {
			add(eventlog.Event{Type: eventlog.TypeReported, Job: job(i), Lease: leases[i], Worker: worker(i),
				Outcome: eventlog.OutcomeSucceeded, Ref: fmt.Sprintf("refs/leaselog/%s/%d", job(i), leases[i])})
		}
		if err := emit(batch); err != nil {
			return fmt.Errorf("synth: wave %d: %w", wave, err)
		}
	}
	return nil
}
