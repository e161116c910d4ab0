package lease

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
)

// The compactor keeps the log's size to its jobs and their decisions: the
// heartbeats of a job that ended more than Options.HeartbeatRetention ago
// (on the service's clock) are folded into summaries (eventlog's
// CompactJob), lease by lease. A pass reads the events that end jobs
// (lease.reported, lease.cancelled, and the expiry or loss of a run) in seq
// order from the cursor the last pass left in the log, compacts each job
// they end, and moves the cursor past them; it stops at the first too
// recent, and after CompactBatch jobs. So a pass costs what it compacts, not
// the length of the log. It takes no lock of the service: it changes
// nothing the table holds or any answer says (a summary folds as the
// heartbeat it replaces), and the events it rewrites are older than any
// command's.

// CompactBatch is how many jobs one pass of the compactor compacts at most.
const CompactBatch = 64

// compactEvery is how often RunCompaction starts a pass while the last found
// nothing more to do, at most: a quarter of the retention when that is less
// (but no less than minCompactEvery), so that a short retention is kept.
const (
	compactEvery    = time.Minute
	minCompactEvery = 100 * time.Millisecond
)

// CompactStats says what passes of the compactor did.
type CompactStats struct {
	eventlog.CompactStats
	Jobs   int    // jobs compacted
	Cursor uint64 // where the next pass starts: every job that ended up to it is done
}

// compaction is what the compactor counted in this life, for metrics.
type compaction struct {
	jobs, summaries, heartbeats, bytes atomic.Int64
}

// CompactionTotals returns what the compactor did in this daemon's life.
func (s *Service) CompactionTotals() CompactStats {
	c := &s.compaction
	var st CompactStats
	st.Jobs = int(c.jobs.Load())
	st.Summaries = int(c.summaries.Load())
	st.Heartbeats = int(c.heartbeats.Load())
	st.Bytes = c.bytes.Load()
	return st
}

// endTypes are the types of the events that may end a job.
var endTypes = []event.Type{event.TypeReported, event.TypeCancelled, event.TypeExpired, event.TypeLost}

// compactDuty is the share of one CPU RunCompaction's passes take at most:
// after each job it compacted, a pass waits nine times as long as the job
// took, so that a backlog (a store compacted for the first time) does not
// take a CPU from the calls it serves for as long as it lasts. A daemon's
// steady flow of ended jobs needs far less (docs/performance.md).
const compactDuty = 0.1

// Compact is one pass of the compactor. It returns what it did, and whether
// it stopped at its batch with more to do. With no retention (0) it does
// nothing.
func (s *Service) Compact() (CompactStats, bool, error) {
	return s.compact(nil)
}

// compact is Compact, calling pace, if not nil, after each job compacted
// with the time it took.
func (s *Service) compact(pace func(time.Duration)) (CompactStats, bool, error) {
	var st CompactStats
	if s.retention <= 0 {
		return st, false, nil
	}
	if err := s.Err(); err != nil {
		return st, false, err
	}
	cutoff := s.now() - int64(s.retention)
	cursor, err := s.log.Compacted()
	if err != nil {
		return st, false, fmt.Errorf("lease: compact: %w", err)
	}
	st.Cursor = cursor
	heads := make([]head, len(endTypes))
	for i, typ := range endTypes {
		heads[i].it = s.log.Query(eventlog.Query{Type: typ, After: cursor})
		heads[i].next()
	}
	defer func() {
		for i := range heads {
			heads[i].it.Close()
		}
	}()
	more := false
	for {
		h := first(heads)
		if h == nil {
			break
		}
		if h.time > cutoff {
			break // ended too recently, and so (but for a clock step) are those after
		}
		if st.Jobs == CompactBatch {
			more = true
			break
		}
		ends, err := s.endsJob(h)
		if err != nil {
			return st, false, err
		}
		if ends {
			start := time.Now()
			c, err := s.log.CompactJob(h.job, h.seq)
			if err != nil {
				return st, false, fmt.Errorf("lease: compact job %q: %w", h.job, err)
			}
			st.Add(c)
			st.Jobs++
			s.compaction.add(c)
			if pace != nil {
				pace(time.Since(start))
			}
		}
		st.Cursor = h.seq
		h.next()
	}
	for i := range heads {
		if err := heads[i].err; err != nil {
			return st, false, fmt.Errorf("lease: compact: read the jobs that ended: %w", err)
		}
	}
	if st.Cursor != cursor {
		if err := s.log.SetCompacted(st.Cursor); err != nil {
			return st, false, fmt.Errorf("lease: compact: %w", err)
		}
	}
	return st, more, nil
}

// add counts a job compacted.
func (c *compaction) add(st eventlog.CompactStats) {
	c.jobs.Add(1)
	c.summaries.Add(int64(st.Summaries))
	c.heartbeats.Add(int64(st.Heartbeats))
	c.bytes.Add(st.Bytes)
}

// head is the next event of one type that may end a job.
type head struct {
	it   *eventlog.Iter
	ok   bool
	err  error
	typ  event.Type
	job  string
	seq  uint64
	time int64
}

func (h *head) next() {
	if h.ok = h.it.Next(); h.ok {
		e := h.it.Event()
		h.typ, h.job, h.seq, h.time = e.Type, e.Job, e.Seq, e.Time // job aliases the iterator until next
		return
	}
	h.err = h.it.Err()
}

// first returns the head with the lowest seq, nil if none is left.
func first(heads []head) *head {
	var f *head
	for i := range heads {
		if h := &heads[i]; h.ok && (f == nil || h.seq < f.seq) {
			f = h
		}
	}
	return f
}

// endsJob says whether h's event ended its job: a report or a cancel always
// does; an expiry or a loss ends a run (failed), while an evaluation goes
// back to the queue (or is cancelled, by an event of its own).
func (s *Service) endsJob(h *head) (bool, error) {
	switch h.typ {
	case event.TypeReported, event.TypeCancelled:
		return true, nil
	}
	j, ok, err := s.archivedJob(h.job)
	if err != nil {
		return false, err
	}
	return ok && j.Kind == event.KindRun, nil
}

// RunCompaction runs passes of the compactor until ctx is done: one after
// another while there is more to do, else one every minute (a quarter of
// the retention if that is shorter), or as tick says (nil: that ticker; a
// test sends its own); paced to compactDuty of a CPU. Each pass is
// logged: at info when it compacted, at debug when not. A pass that fails
// is logged and tried again at the next tick; a failed log ends it.
func (s *Service) RunCompaction(ctx context.Context, tick <-chan time.Time) error {
	if s.retention <= 0 {
		return nil
	}
	if tick == nil {
		t := time.NewTicker(min(compactEvery, max(s.retention/4, minCompactEvery)))
		defer t.Stop()
		tick = t.C
	}
	pace := func(took time.Duration) {
		t := time.NewTimer(time.Duration(float64(took) * (1/compactDuty - 1)))
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	for {
		start := time.Now()
		st, more, err := s.compact(pace)
		switch {
		case errors.Is(err, eventlog.ErrFailed) || errors.Is(err, eventlog.ErrClosed) || errors.Is(err, ErrFailed):
			return nil // the service's own failure says it
		case err != nil:
			s.logger.Error().Err(err).Msg("compaction failed; trying again later")
		case st.Jobs > 0:
			s.logger.Info().Int("jobs", st.Jobs).Int("summaries", st.Summaries).Int("heartbeats", st.Heartbeats).
				Int64("bytes", st.Bytes).Uint64("cursor", st.Cursor).Float64("seconds", time.Since(start).Seconds()).
				Msg("heartbeats compacted")
		default:
			s.logger.Debug().Uint64("cursor", st.Cursor).Msg("compaction: nothing to compact")
		}
		if more && err == nil {
			select {
			case <-ctx.Done():
				return nil
			default:
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		}
	}
}
