// Package synth writes synthetic but legal lease logs, for benchmarks: waves
// of jobs that are submitted, acquired, started, heartbeated and reported, as
// a busy daemon's log would hold them, with a few lost workers whose late
// reports are stale, and optionally a set of leases left live at the end.
package synth

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/leaselog/leaselog/event"
)

// Shape says what a synthetic log holds.
type Shape struct {
	Wave       int // jobs in flight at once
	Heartbeats int // heartbeats per lease
	Workers    int
	// StaleEvery makes every StaleEvery-th job of the history a run whose
	// worker is lost: its lease expires and its late report is kept as a
	// lease.stale_report. 0: none.
	StaleEvery int
	// Live leaves this many jobs acquired and running after the history.
	Live int
	// Renew, if set, spreads each round of a wave's heartbeats (one per
	// lease) over Renew of time and sends each worker's as a batch of its
	// own, as a worker heartbeats all its leases at once; and each event
	// gets an id (a ULID, its randomness seeded), as the daemon gives it.
	// Zero: a wave is one batch, an event 1 ms after the one before, with
	// no id.
	Renew time.Duration
}

// Default is the shape the benchmarks use: 8 events per job.
var Default = Shape{Wave: 100, Heartbeats: 4, Workers: 64}

// Epoch is the time of seq 0; event seq s happens at Epoch + s ms.
const Epoch = 1_767_225_600_000_000_000

// TimeOf is the time the synthetic log gives event seq, unless its shape
// has a Renew.
func TimeOf(seq uint64) int64 { return Epoch + int64(seq)*1_000_000 }

// Job names the i-th job of wave w, so that benchmarks can ask for one.
func Job(wave, i int) string { return fmt.Sprintf("job-%d-%d", wave, i) }

// Events calls emit with batches of legal events, numbered from first: at
// least history events of finished jobs, then s.Live live leases. The batch is
// reused after emit returns.
func (s Shape) Events(first uint64, history int, emit func([]event.Event) error) error {
	g := gen{seq: first, shape: s, emit: emit, now: TimeOf(first), ids: rand.New(rand.NewPCG(first, 7))}
	for wave := 0; int(g.seq-first) < history; wave++ {
		if err := g.wave(wave, s.Wave, true); err != nil {
			return err
		}
	}
	for i, wave := 0, -1; i < s.Live; i += s.Wave {
		if err := g.wave(wave-i/s.Wave, min(s.Wave, s.Live-i), false); err != nil {
			return err
		}
	}
	return nil
}

type gen struct {
	seq    uint64
	shape  Shape
	emit   func([]event.Event) error
	batch  []event.Event
	leases []uint64
	now    int64      // the next event's time
	ids    *rand.Rand // the ids' randomness, with Renew
}

func (g *gen) add(e event.Event) {
	e.Seq, e.Time = g.seq, TimeOf(g.seq)
	if g.shape.Renew > 0 {
		e.Time = g.now
		g.now += int64(time.Millisecond)
		var r [10]byte
		for i := range r {
			r[i] = byte(g.ids.Uint32())
		}
		e.ID, _ = ulid.New(uint64(e.Time/1e6), bytes.NewReader(r[:]))
	}
	if e.Type == event.TypeAcquired {
		e.Lease = g.seq
	}
	g.seq++
	g.batch = append(g.batch, e)
}

// flush emits the batch so far, if any.
func (g *gen) flush(wave int) error {
	if len(g.batch) == 0 {
		return nil
	}
	if err := g.emit(g.batch); err != nil {
		return fmt.Errorf("synth: wave %d: %w", wave, err)
	}
	g.batch = g.batch[:0]
	return nil
}

// rounds emits the heartbeats of a wave's n leases, round by round, each
// worker's round a batch, a round over Renew.
func (g *gen) rounds(wave, n int, lost func(int) bool, worker func(int) string) error {
	if err := g.flush(wave); err != nil {
		return err
	}
	leases := g.leases[:n]
	step := int64(g.shape.Renew) / int64(max(n, 1))
	for h := 0; h < g.shape.Heartbeats; h++ {
		start := g.now
		for w := 0; w < g.shape.Workers; w++ {
			for i := w; i < n; i += g.shape.Workers {
				if !lost(i) {
					g.add(event.Event{Type: event.TypeHeartbeat, Job: Job(wave, i), Lease: leases[i], Worker: worker(i)})
					g.now += step
				}
			}
			if err := g.flush(wave); err != nil {
				return err
			}
		}
		g.now = max(g.now, start+int64(g.shape.Renew))
	}
	return nil
}

// wave emits one wave of n jobs; finish says whether they end (reported, or
// lost and stale) or stay live.
func (g *gen) wave(wave, n int, finish bool) error {
	g.batch = g.batch[:0]
	if cap(g.leases) < n {
		g.leases = make([]uint64, n)
	}
	leases := g.leases[:n]
	worker := func(i int) string { return fmt.Sprintf("worker-%d", i%g.shape.Workers) }
	lost := func(i int) bool {
		return finish && g.shape.StaleEvery > 0 && (wave*g.shape.Wave+i)%g.shape.StaleEvery == 0
	}
	for i := 0; i < n; i++ {
		g.add(event.Event{Type: event.TypeQueued, Job: Job(wave, i), Kind: event.KindRun, Spec: []byte(`{"run":"make eval"}`)})
	}
	for i := 0; i < n; i++ {
		g.add(event.Event{Type: event.TypeAcquired, Job: Job(wave, i), Worker: worker(i)})
		leases[i] = g.seq - 1
	}
	for i := 0; i < n; i++ {
		g.add(event.Event{Type: event.TypeRunning, Job: Job(wave, i), Lease: leases[i], Worker: worker(i)})
	}
	if finish && g.shape.Renew > 0 {
		if err := g.rounds(wave, n, lost, worker); err != nil {
			return err
		}
	}
	if finish {
		for h := 0; h < g.shape.Heartbeats && g.shape.Renew == 0; h++ {
			for i := 0; i < n; i++ {
				if !lost(i) {
					g.add(event.Event{Type: event.TypeHeartbeat, Job: Job(wave, i), Lease: leases[i], Worker: worker(i)})
				}
			}
		}
		for i := 0; i < n; i++ {
			ref := fmt.Sprintf("refs/leaselog/%s/%d", Job(wave, i), leases[i])
			if lost(i) {
				g.add(event.Event{Type: event.TypeExpired, Job: Job(wave, i), Lease: leases[i], Worker: worker(i), Reason: event.ReasonWorkerLost})
				g.add(event.Event{Type: event.TypeStaleReport, Job: Job(wave, i), Lease: leases[i], Worker: worker(i), Outcome: event.OutcomeSucceeded, Ref: ref})
				continue
			}
			g.add(event.Event{Type: event.TypeReported, Job: Job(wave, i), Lease: leases[i], Worker: worker(i),
				Outcome: event.OutcomeSucceeded, Ref: ref})
		}
	}
	return g.flush(wave)
}
