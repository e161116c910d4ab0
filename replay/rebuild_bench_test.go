//go:build unix

package replay_test

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/replay"
)

// BenchmarkRebuild measures a restart of a daemon holding many queued
// jobs: a store of n jobs submitted in batches of 1,000 (every tenth
// acquired), with a snapshot written every n/10 events as the daemon
// writes them (the newest three kept, the older deleted) and n/20 events
// after the last. impl=rebuild is replay.Rebuild; impl=list is how it
// found its snapshot before (replay.RebuildListing): the snapshots listed,
// then the newest read by its key (since the log keeps its list of
// snapshots, only its first listing reads the store: impl=list now pays the
// second read alone). With LEASELOG_BENCH_STORE naming a
// daemon's store (`leaselog bench --mode million --store`, copied: it is
// opened read-only, but Pebble still claims it), that store is rebuilt
// instead. Beside the time, it reports the CPU the process spent a
// rebuild (cpu-ms/op: Pebble's and the GC's goroutines too), which a busy
// machine inflates less.
//
//	go test -run '^$' -bench BenchmarkRebuild -benchtime 5x -count 3 ./replay
func BenchmarkRebuild(b *testing.B) {
	jobs, dir := "200000", os.Getenv("LEASELOG_BENCH_STORE")
	var last uint64
	if dir == "" {
		dir = b.TempDir()
		last = queuedStore(b, dir, 200_000)
	} else {
		jobs = "store"
	}
	log := openLog(b, dir)
	if last == 0 {
		seqs, err := log.Snapshots()
		if err != nil || len(seqs) == 0 {
			b.Fatalf("%s: snapshots %v, %v", dir, seqs, err)
		}
		last = seqs[0]
	}
	for _, impl := range []struct {
		name    string
		rebuild func(replay.Log, zerolog.Logger) (*projection.Table, replay.Stats, error)
	}{
		{"list", replay.RebuildListing},
		{"rebuild", replay.Rebuild},
	} {
		b.Run(fmt.Sprintf("jobs=%s/impl=%s", jobs, impl.name), func(b *testing.B) {
			before := cpuTime(b)
			measure(b, 0, func() error {
				t, st, err := impl.rebuild(log, zerolog.Nop())
				if err == nil && (t.Seq() != log.LastSeq() || st.SnapshotSeq != last) {
					err = fmt.Errorf("rebuilt to %d from snapshot %d; want %d from %d", t.Seq(), st.SnapshotSeq, log.LastSeq(), last)
				}
				return err
			})
			b.ReportMetric(float64((cpuTime(b)-before).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// queuedStore writes the store of BenchmarkRebuild in dir, folding every
// batch into a table as the daemon does, and returns the seq of its newest
// snapshot.
func queuedStore(b *testing.B, dir string, jobs int) uint64 {
	b.Helper()
	log, err := eventlog.Open(dir, eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	tab := projection.New()
	tab.SetRetire(projection.RetireRecord)
	every, tail := uint64(jobs/10), jobs/20
	var snap uint64
	batch := make([]event.Event, 0, 1100)
	for i := 0; i < jobs+tail; {
		batch = batch[:0]
		for ; len(batch) < 1000 && i < jobs+tail; i++ {
			job := fmt.Sprintf("job-%07d", i)
			batch = append(batch, event.Event{Type: event.TypeQueued, Time: int64(i), Job: job, Kind: event.KindEvaluation, Spec: []byte("{}")})
			if i%10 == 0 {
				batch = append(batch, event.Event{Type: event.TypeAcquired, Time: int64(i), Job: job, Worker: "w"})
			}
		}
		c, err := log.Stage(batch, func(evs []event.Event) ([]eventlog.Record, error) {
			for i := range evs {
				if err := tab.Apply(&evs[i]); err != nil {
					return nil, err
				}
			}
			return tab.TakeRetired(), nil
		})
		if err == nil {
			err = c.Wait()
		}
		if err != nil {
			b.Fatal(err)
		}
		if i <= jobs && tab.Seq()/every != (tab.Seq()-uint64(len(batch)))/every {
			if err := log.PutSnapshot(tab.Seq(), tab.Snapshot()); err != nil {
				b.Fatal(err)
			}
			snap = tab.Seq()
		}
	}
	if err := log.Close(); err != nil {
		b.Fatal(err)
	}
	// Opened once more for writing, as a restart after a crash is: Pebble
	// flushes what its WAL held into tables, where the snapshots are read
	// from blocks, not from the memtable.
	if log, err = eventlog.Open(dir, eventlog.Options{Logger: zerolog.Nop()}); err == nil {
		err = log.Close()
	}
	if err != nil {
		b.Fatal(err)
	}
	return snap
}

// cpuTime is the CPU time the process has spent, user and system.
func cpuTime(b *testing.B) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
