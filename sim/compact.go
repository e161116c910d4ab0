package sim

import (
	"math/rand/v2"
	"time"
)

// compaction is the daemon's compactor in the simulation: after a sweep,
// now and then, the service's compaction passes run to their end
// (lease.Service.Compact), with a heartbeat retention and a summary size
// drawn per seed. Its draws come from a stream of their own, seeded apart
// from the run's, and it schedules nothing: a run with it takes the very
// steps a run without it (Options.NoCompaction) takes, and its clients see
// the very same answers — what TestCompactionChangesNothing holds.
type compaction struct {
	rng       *rand.Rand
	retention time.Duration // 0: the daemon keeps every heartbeat
	segment   int           // the most heartbeats one summary stands for
	every     int           // a sweep in every so many compacts, on average
}

func newCompaction(seed uint64, off bool) *compaction {
	r := rand.New(rand.NewPCG(seed, 0x636f6d70616374)) // "compact"
	c := &compaction{rng: r}
	if off {
		return c
	}
	c.retention = []time.Duration{time.Second / 2, 2 * time.Second, 5 * time.Second, 20 * time.Second}[r.IntN(4)]
	c.segment = []int{1, 2, 5, 4096}[r.IntN(4)]
	c.every = 1 + r.IntN(40)
	return c
}

// compactAfterSweep runs the compactor, if its draw says so.
func (d *daemon) compactAfterSweep() {
	c := d.s.compact
	if c.retention == 0 || c.rng.IntN(c.every) != 0 {
		return
	}
	for more := true; more; {
		st, m, err := d.svc.Compact()
		if err != nil {
			d.s.fail("compact: %v", err)
			return
		}
		more = m
		if st.Jobs > 0 {
			d.s.stats.Compactions++
			d.s.stats.Compacted += st.Heartbeats
			d.s.tracef("daemon: compacted %d jobs: %d heartbeats removed, %d summaries (cursor %d)", st.Jobs, st.Heartbeats, st.Summaries, st.Cursor)
		}
	}
}
