package eventlog

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/leaselog/leaselog/event"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// The time index answers "which events happened between Since and Until"
// without reading the rest of the log: an auditor's window costs what the
// window holds.
//
// Event times are the daemon's wall clock, which may step backwards, so the
// log is not sorted by time. It is cut into runs instead: maximal runs of
// consecutive sequence numbers whose times fall in the same Unix second
// (floor). The first event of each run writes two keys, in the same batch as
// the event:
//
//	'c' second(8) seq(8) -> empty       runs by second, then seq
//	'r' seq(8)           -> second(8)   runs by seq: a run ends where the next begins
//
// second is the signed Unix second with its sign bit flipped, so that keys
// sort by second. A busy log writes one run a second; a log whose clock never
// steps back has its runs in the same order in both families.
//
// A window [Since, Until) is answered by the runs whose second lies in
// [floor(Since), floor(Until-1)]: every event in the window is in one of
// them, since an event's run has the second of its time. They are found by
// second (the clock keys of the window) or, for a query that follows the log
// past a cursor, by seq (the run keys after the cursor), whichever reads
// less. Their seq ranges are read from the type index, or the log, and each
// event is still filtered by its exact time. A query by job or worker reads
// its own index, which is small, without the time index.
//
// metaTimeIndexKey marks a store whose index is whole. A store written by an
// older build has none, and a read-write Open backfills the index from the
// events (once); a read-only Open leaves it, and queries read as before.

// runState is the second of the last run written. Log keeps it under mu for
// the next append; Stage works on a copy and keeps it once the batch is
// applied, so that a batch that fails leaves no run behind.
type runState struct {
	sec int64
	ok  bool // false before the first event
}

// starts reports whether an event at time ns starts a new run, and moves the
// state to that event.
func (r *runState) starts(ns int64) bool {
	sec := secondOf(ns)
	if r.ok && r.sec == sec {
		return false
	}
	r.sec, r.ok = sec, true
	return true
}

// secondOf is the Unix second of ns, rounded down (also before 1970).
func secondOf(ns int64) int64 {
	s := ns / 1e9
	if ns%1e9 < 0 {
		s--
	}
	return s
}

func appendSecond(dst []byte, sec int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(sec)^(1<<63))
}

func clockKey(dst []byte, sec int64, seq uint64) []byte {
	dst = appendSecond(append(dst, prefixClock), sec)
	return binary.BigEndian.AppendUint64(dst, seq)
}

func runKey(dst []byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, prefixRun), seq)
}

// addRun writes the keys of a run that starts at seq with second sec into b,
// using s as scratch, and returns s.
func addRun(b *pebble.Batch, s []byte, sec int64, seq uint64) ([]byte, error) {
	s = clockKey(s[:0], sec, seq)
	if err := b.Set(s, nil, nil); err != nil {
		return s, err
	}
	s = runKey(s[:0], seq)
	k := len(s)
	s = appendSecond(s, sec)
	return s, b.Set(s[:k], s[k:], nil)
}

// runSeq reads the seq of a key of the run family.
func runSeq(key []byte) (uint64, error) {
	if len(key) != 9 {
		return 0, fmt.Errorf("%w: time index key %q has the wrong length", ErrCorrupt, key)
	}
	return binary.BigEndian.Uint64(key[1:]), nil
}

// openTimeIndex makes the time index whole at Open, for a log whose last
// event is last, and returns the state of its last run and whether queries
// may use the index. A store without the marker is backfilled; one with it
// has the events after its last indexed run checked, so that events appended
// by an older build since are indexed too. A read-only store is only read:
// if its index is not whole, queries do without.
func (l *Log) openTimeIndex(last uint64) (runState, bool, error) {
	v, closer, err := l.db.Get(metaTimeIndexKey)
	marked := err == nil
	switch {
	case marked:
		n := len(v)
		closer.Close()
		if n != 1 {
			return runState{}, false, fmt.Errorf("%w: key %q holds %d bytes, want 1", ErrCorrupt, metaTimeIndexKey, n)
		}
	case !errors.Is(err, pebble.ErrNotFound):
		return runState{}, false, fmt.Errorf("eventlog: read key %q: %w", metaTimeIndexKey, err)
	}
	from, run := uint64(1), runState{}
	if marked {
		seq, sec, found, err := l.lastRun()
		if err != nil {
			return runState{}, false, err
		}
		if found {
			if seq > last {
				return runState{}, false, fmt.Errorf("%w: time index key %q names seq %d, past the last event %d", ErrCorrupt, runKey(nil, seq), seq, last)
			}
			from, run = seq+1, runState{sec: sec, ok: true}
		}
	}
	if l.opts.ReadOnly {
		if !marked {
			return run, false, nil
		}
		missing, err := l.indexRuns(from, last, &run, false, false)
		return run, missing == 0, err
	}
	if _, err := l.indexRuns(from, last, &run, true, !marked); err != nil {
		return runState{}, false, fmt.Errorf("eventlog: backfill the time index: %w", err)
	}
	return run, true, nil
}

// lastRun returns the start and second of the last run indexed.
func (l *Log) lastRun() (seq uint64, sec int64, found bool, err error) {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixRun}, UpperBound: []byte{prefixRun + 1}})
	if err != nil {
		return 0, 0, false, fmt.Errorf("eventlog: find the last run of the time index: %w", err)
	}
	defer it.Close()
	if !it.Last() {
		if err := it.Error(); err != nil {
			return 0, 0, false, fmt.Errorf("eventlog: find the last run of the time index: %w", err)
		}
		return 0, 0, false, nil
	}
	if seq, err = runSeq(it.Key()); err != nil {
		return 0, 0, false, err
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return 0, 0, false, fmt.Errorf("eventlog: read time index key %q: %w", it.Key(), err)
	}
	if len(v) != 8 {
		return 0, 0, false, fmt.Errorf("%w: time index key %q holds %d bytes, want 8", ErrCorrupt, it.Key(), len(v))
	}
	return seq, int64(binary.BigEndian.Uint64(v) ^ (1 << 63)), true, nil
}

// backfillBatch is the size at which a backfill commits what it has so far:
// a store with a run per event writes two keys per event.
const backfillBatch = 4 << 20

// indexRuns reads the events from..last, after the run state run, and counts
// the runs they start. With write, it writes their keys, and the marker if
// mark, durably; without, it stops at the first.
func (l *Log) indexRuns(from, last uint64, run *runState, write, mark bool) (missing int, err error) {
	var b *pebble.Batch
	if write {
		b = l.db.NewBatch()
		defer func() { b.Close() }()
	}
	apply := func(opts *pebble.WriteOptions) error {
		if err := l.db.Apply(b, opts); err != nil {
			return err
		}
		b.Reset()
		return l.Err() // a Fatalf during the write
	}
	if from <= last {
		it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: eventKey(nil, from), UpperBound: eventKey(nil, last+1)})
		if err != nil {
			return 0, err
		}
		defer it.Close()
		var e event.Event
		var s []byte
		for ok := it.First(); ok; ok = it.Next() {
			seq, err := seqSuffix(it.Key())
			if err != nil {
				return missing, err
			}
			v, err := it.ValueAndErr()
			if err != nil {
				return missing, fmt.Errorf("read seq %d: %w", seq, err)
			}
			if err := event.DecodeAliased(seq, v, &e); err != nil {
				return missing, err
			}
			if !run.starts(e.Time) {
				continue
			}
			missing++
			if !write {
				return missing, nil
			}
			if s, err = addRun(b, s, run.sec, seq); err != nil {
				return missing, err
			}
			if b.Len() >= backfillBatch {
				if err := apply(pebble.NoSync); err != nil {
					return missing, err
				}
			}
		}
		if err := it.Error(); err != nil {
			return missing, err
		}
	}
	if mark {
		if err := b.Set(metaTimeIndexKey, []byte{1}, nil); err != nil {
			return missing, err
		}
	}
	if write && !b.Empty() {
		// Synced: it makes every earlier batch of the backfill durable too.
		return missing, apply(pebble.Sync)
	}
	return missing, nil
}

// seqRange is the sequence numbers lo..hi, both included.
type seqRange struct{ lo, hi uint64 }

// maxWindowRuns bounds the runs a query keeps apart. A window with more reads
// one span, from the first run in it to the end of the last: what a log whose
// clock never stepped back would read anyway.
var maxWindowRuns = 1 << 16 // a variable for tests

// clockBudget is how many clock keys a query reads before it gives up on them
// and walks the runs of (after, upper] by seq instead, keeping those in the
// window: there are no more of those than events in (after, upper]. So a
// stream that follows the log with an old Since reads what is new, not every
// run since Since, and a query costs at most twice the cheaper of the two. A
// variable for tests.
var clockBudget = func(after, upper uint64) uint64 { return upper - after }

// windowRanges returns the seq ranges, ordered and disjoint, within
// (after, upper] that hold every event with a time in [since, until) (a zero
// bound is no bound). Events in them may still lie outside the window.
func (l *Log) windowRanges(since, until int64, after, upper uint64) ([]seqRange, error) {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if since != 0 {
		lo = secondOf(since)
	}
	if until != 0 {
		if until == math.MinInt64 {
			return nil, nil
		}
		hi = secondOf(until - 1)
	}
	if lo > hi || after >= upper {
		return nil, nil
	}
	starts, many, ok, err := l.clockStarts(lo, hi, upper, clockBudget(after, upper))
	if err != nil || !ok {
		if err == nil {
			return l.walkRuns(lo, hi, after, upper)
		}
		return nil, err
	}
	if len(starts) == 0 {
		return nil, nil
	}
	// In seq order; already so unless the clock stepped back.
	slices.SortFunc(starts, func(a, b runStart) int { return cmp.Compare(a.seq, b.seq) })
	starts = slices.CompactFunc(starts, func(a, b runStart) bool { return a.seq == b.seq })
	ranges, err := l.runRanges(starts)
	if err != nil {
		return nil, err
	}
	if many {
		ranges = []seqRange{{ranges[0].lo, ranges[len(ranges)-1].hi}}
	}
	return clip(ranges, after, upper), nil
}

// clip keeps what lies in (after, upper] of ranges, in place.
func clip(ranges []seqRange, after, upper uint64) []seqRange {
	out := ranges[:0]
	for _, r := range ranges {
		r.lo, r.hi = max(r.lo, after+1), min(r.hi, upper)
		if r.lo <= r.hi {
			out = append(out, r)
		}
	}
	return out
}

// clockStarts reads the clock keys of the seconds lo..hi and returns the
// runs they start up to upper. If they are more than maxWindowRuns, it
// returns only the first and the last, and many. If there are more than
// budget keys, it stops, and ok is false.
func (l *Log) clockStarts(lo, hi int64, upper, budget uint64) (starts []runStart, many, ok bool, err error) {
	cit, err := l.db.NewIter(&pebble.IterOptions{
		LowerBound: clockKey(nil, lo, 0),
		UpperBound: prefixEnd(appendSecond([]byte{prefixClock}, hi)),
	})
	if err != nil {
		return nil, false, false, err
	}
	defer cit.Close()
	first, last := runStart{seq: math.MaxUint64}, runStart{}
	var read uint64
	for valid := cit.First(); valid; valid = cit.Next() {
		if read++; read > budget {
			return nil, false, false, nil
		}
		key := cit.Key()
		if len(key) != 17 {
			return nil, false, false, fmt.Errorf("%w: time index key %q has the wrong length", ErrCorrupt, key)
		}
		r := runStart{seq: binary.BigEndian.Uint64(key[9:]), sec: int64(binary.BigEndian.Uint64(key[1:9]) ^ (1 << 63))}
		if r.seq > upper {
			continue // not durable when the query began
		}
		if r.seq < first.seq {
			first = r
		}
		if r.seq > last.seq {
			last = r
		}
		if !many {
			starts = append(starts, r)
			many = len(starts) > maxWindowRuns
		}
	}
	if err := cit.Error(); err != nil {
		return nil, false, false, err
	}
	if many {
		starts = []runStart{first, last}
	}
	return starts, many, true, nil
}

// walkRuns reads the run keys of (after, upper] by seq, from the run that
// holds after+1, and returns the ranges of those whose second is in lo..hi,
// clipped to (after, upper].
func (l *Log) walkRuns(lo, hi int64, after, upper uint64) ([]seqRange, error) {
	rit, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixRun}, UpperBound: runKey(nil, upper+1)})
	if err != nil {
		return nil, err
	}
	defer rit.Close()
	var ranges []seqRange
	valid := rit.SeekLT(runKey(nil, after+2)) // the run that holds after+1
	if !valid {
		valid = rit.First()
	}
	for valid {
		seq, err := runSeq(rit.Key())
		if err != nil {
			return nil, err
		}
		v, err := rit.ValueAndErr()
		if err != nil {
			return nil, err
		}
		if len(v) != 8 {
			return nil, fmt.Errorf("%w: time index key %q holds %d bytes, want 8", ErrCorrupt, rit.Key(), len(v))
		}
		sec := int64(binary.BigEndian.Uint64(v) ^ (1 << 63))
		end := uint64(math.MaxUint64 - 1)
		if valid = rit.Next(); valid {
			next, err := runSeq(rit.Key())
			if err != nil {
				return nil, err
			}
			end = next - 1
		}
		if sec < lo || sec > hi {
			continue
		}
		if n := len(ranges); n > 0 && ranges[n-1].hi+1 == seq {
			ranges[n-1].hi = end
		} else {
			ranges = append(ranges, seqRange{seq, end})
		}
	}
	if err := rit.Error(); err != nil {
		return nil, err
	}
	return clip(ranges, after, upper), nil
}

// runStart is the first event of a run, as the clock keys name it.
type runStart struct {
	seq uint64
	sec int64
}

// runRanges turns run starts, sorted by seq, into the seq ranges of their runs,
// merging runs that follow each other. The last run of the log ends at
// math.MaxUint64-1.
func (l *Log) runRanges(starts []runStart) ([]seqRange, error) {
	rit, err := l.db.NewIter(&pebble.IterOptions{LowerBound: runKey(nil, starts[0].seq), UpperBound: []byte{prefixRun + 1}})
	if err != nil {
		return nil, err
	}
	defer rit.Close()
	var ranges []seqRange
	var key []byte
	for i := 0; i < len(starts); {
		lo := starts[i].seq
		key = runKey(key[:0], lo)
		if !rit.SeekGE(key) || !bytes.Equal(rit.Key(), key) {
			if err := rit.Error(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w: time index key %q names seq %d, which starts no run (key %q is missing)",
				ErrCorrupt, clockKey(nil, starts[i].sec, lo), lo, key)
		}
		for {
			i++
			next := uint64(math.MaxUint64)
			if rit.Next() {
				if next, err = runSeq(rit.Key()); err != nil {
					return nil, err
				}
			} else if err := rit.Error(); err != nil {
				return nil, err
			}
			if i < len(starts) && starts[i].seq == next {
				continue // the next run is in the window too
			}
			ranges = append(ranges, seqRange{lo, next - 1})
			break
		}
	}
	return ranges, nil
}
