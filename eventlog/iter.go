package eventlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/leaselog/leaselog/event"

	"github.com/cockroachdb/pebble/v2"
)

// Query selects events. Zero fields select everything; set fields combine
// with AND. The most selective index available answers it: job, then worker,
// then type; with none of them, the log itself is scanned. Without a job or a
// worker, a time window (Since, Until) narrows what is read of the type index
// or the log to the runs of the time index in the window (timeindex.go).
type Query struct {
	Type   event.Type
	Job    string
	Worker string
	After  uint64 // only events with Seq > After (a cursor)
	Since  int64  // only events with Time >= Since (Unix ns), if non-zero
	Until  int64  // only events with Time < Until (Unix ns), if non-zero
	Limit  int    // at most this many events, if positive

	// ReadAhead reads the log on a second goroutine while the caller works
	// through what was read, for long scans of the log itself (replay); it is
	// ignored when an index answers the query.
	ReadAhead bool
}

// Iter walks events in sequence order. It sees only events that were durable
// when it was created. Not safe for concurrent use.
//
//	it := log.Iter(1)
//	defer it.Close()
//	for it.Next() { use(it.Event()) }
//	if err := it.Err(); err != nil { ... }
type Iter struct {
	q      Query
	upper  uint64 // last seq visible to this iterator
	index  *pebble.Iterator
	events *pebble.Iterator // nil for a scan of the log itself
	prefix int              // length of the index prefix before the seq suffix
	seen   int
	ev     event.Event
	key    []byte // scratch for event keys
	err    error
	primed bool
	ahead  *readAhead
	what   string // what it reads, for errors: "the log", "the index of job \"j1\""

	// ranges, when not nil, are the seq ranges the time index found for the
	// window, ordered, from the current one on; Next seeks over the gaps.
	ranges  []seqRange
	seekKey []byte // the index (or log) prefix, then scratch for seeks

	// A scan of the whole log from a seq on (checked) holds every gap it
	// meets to the runs of compacted seqs (compact.go): want is the seq the
	// next event has unless some were compacted, gap the compacted seqs
	// just before the current event. The runs are read through the same
	// Pebble snapshot as the events (snap), so that a compaction under way
	// cannot show one without the other; a store never compacted has no
	// runs (snap is nil), and every gap in it is corruption.
	checked bool
	lo      uint64 // the first seq the scan may return
	want    uint64
	gap     gapRun
	snap    *pebble.Snapshot
	ownSnap bool // the iterator took snap, and closes it
}

// Iter returns an iterator over every durable event with Seq >= from.
func (l *Log) Iter(from uint64) *Iter {
	after := uint64(0)
	if from > 0 {
		after = from - 1
	}
	return l.Query(Query{After: after})
}

// Query returns an iterator over the durable events q selects.
func (l *Log) Query(q Query) *Iter { return l.query(q, nil, l.durable.Load()) }

// query is Query on snap (nil: the store as it is), up to seq upper.
func (l *Log) query(q Query, snap *pebble.Snapshot, upper uint64) *Iter {
	it := &Iter{q: q, upper: upper, what: "the log"}
	var prefix []byte
	switch {
	case q.Job != "":
		prefix = stringIndexPrefix(nil, prefixJob, q.Job)
		it.what = fmt.Sprintf("the index of job %q", q.Job)
	case q.Worker != "":
		prefix = stringIndexPrefix(nil, prefixWorker, q.Worker)
		it.what = fmt.Sprintf("the index of worker %q", q.Worker)
	case q.Type != 0:
		prefix = typeIndexPrefix(nil, q.Type)
		it.what = fmt.Sprintf("the index of type %s", q.Type)
	}
	lo, hi := q.After+1, it.upper
	if (q.Since != 0 || q.Until != 0) && q.Job == "" && q.Worker == "" && l.timeIndexed {
		// The job and worker indexes are small: they need no time index.
		ranges, err := l.windowRanges(q.Since, q.Until, q.After, it.upper)
		if err != nil {
			it.err = fmt.Errorf("eventlog: read the time index for %s: %w", it.what, err)
			return it
		}
		if len(ranges) == 0 {
			return it // nothing in the window
		}
		it.ranges, lo, hi = ranges, ranges[0].lo, ranges[len(ranges)-1].hi
	}
	var err error
	if prefix == nil {
		it.seekKey = []byte{prefixEvent}
		var r pebble.Reader = l.db
		it.checked, it.lo, it.want = it.ranges == nil || q.ReadAhead, lo, lo
		switch {
		case snap != nil:
			it.snap, r = snap, snap
		case it.checked && l.format.Load() >= compactedFormat:
			it.snap, it.ownSnap = l.db.NewSnapshot(), true
			r = it.snap
		}
		it.index, err = r.NewIter(&pebble.IterOptions{
			LowerBound: eventKey(nil, lo),
			UpperBound: eventKey(nil, hi+1),
		})
		if err == nil && q.ReadAhead {
			// The reader reads the gaps between ranges too: their events
			// are outside the window, and matches drops them.
			it.ranges = nil
			it.ahead = startReadAhead(it.index)
		}
	} else {
		it.prefix = len(prefix)
		it.seekKey = prefix
		lower := append(append([]byte(nil), prefix...), eventKey(nil, lo)[1:]...)
		upper := append(append([]byte(nil), prefix...), eventKey(nil, hi+1)[1:]...)
		it.index, err = l.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
		if err == nil {
			it.events, err = l.db.NewIter(&pebble.IterOptions{
				LowerBound: []byte{prefixEvent},
				UpperBound: []byte{prefixEvent + 1},
			})
		}
	}
	if err != nil {
		it.err = it.readErr(err)
	}
	return it
}

// readErr wraps an error of the store met while reading, naming what was
// read and where: what a reader got before it is not the whole answer.
func (it *Iter) readErr(err error) error {
	return fmt.Errorf("eventlog: read %s after seq %d: %w", it.what, max(it.q.After, it.ev.Seq), err)
}

// Next advances to the next selected event and reports whether there is one.
func (it *Iter) Next() bool {
	if it.err != nil || it.index == nil {
		return false
	}
	if it.q.Limit > 0 && it.seen >= it.q.Limit {
		return false
	}
	if it.ahead != nil {
		return it.nextAhead()
	}
	for {
		var ok bool
		if !it.primed {
			ok, it.primed = it.index.First(), true
		} else {
			ok = it.index.Next()
		}
		if ok && it.ranges != nil {
			ok = it.skipGaps()
		}
		if !ok {
			if err := it.index.Error(); err != nil && it.err == nil {
				it.err = it.readErr(err)
			}
			return false
		}
		if !it.load() {
			return false
		}
		if it.matches() {
			it.seen++
			return true
		}
	}
}

// skipGaps moves the index iterator, which is on a key, to the first key at
// or after it that lies in one of it.ranges, and reports whether there is one.
func (it *Iter) skipGaps() bool {
	for {
		seq, err := seqSuffix(it.index.Key())
		if err != nil {
			it.err = err
			return false
		}
		for len(it.ranges) > 0 && seq > it.ranges[0].hi {
			it.ranges = it.ranges[1:]
		}
		if len(it.ranges) == 0 {
			return false
		}
		if seq >= it.ranges[0].lo {
			return true
		}
		it.seekKey = binary.BigEndian.AppendUint64(it.seekKey[:it.prefixLen()], it.ranges[0].lo)
		if !it.index.SeekGE(it.seekKey) {
			return false
		}
	}
}

// prefixLen is the length of what precedes the seq in the keys it.index reads.
func (it *Iter) prefixLen() int {
	if it.events == nil {
		return 1 // the log: 'e' seq
	}
	return it.prefix
}

// load decodes the event the index iterator is on into it.ev.
func (it *Iter) load() bool {
	key := it.index.Key()
	seq, err := seqSuffix(key)
	if err != nil {
		it.err = err
		return false
	}
	var val []byte
	if it.events == nil {
		val, err = it.index.ValueAndErr()
	} else {
		if len(key) != it.prefix+8 {
			it.err = fmt.Errorf("%w: index key %q has the wrong length", ErrCorrupt, key)
			return false
		}
		ek := eventKey(it.key[:0], seq)
		it.key = ek
		if !it.events.SeekGE(ek) || string(it.events.Key()) != string(ek) {
			if err := it.events.Error(); err != nil {
				it.err = fmt.Errorf("eventlog: read seq %d: %w", seq, err)
			} else {
				it.err = fmt.Errorf("%w: index key %q names seq %d, which is missing", ErrCorrupt, key, seq)
			}
			return false
		}
		val, err = it.events.ValueAndErr()
	}
	if err != nil {
		it.err = fmt.Errorf("eventlog: read seq %d: %w", seq, err)
		return false
	}
	if !it.follows(seq) {
		return false
	}
	if err := event.DecodeAliased(seq, val, &it.ev); err != nil {
		it.err = err
		return false
	}
	return true
}

// follows checks, on a checked scan, that seq comes next: right after the
// event before, or after seqs a compaction removed, exactly a run of them
// (or, at the scan's start, the end of one), which it keeps as it.gap.
// Anything else is corruption, named by the missing seqs.
func (it *Iter) follows(seq uint64) bool {
	it.gap = gapRun{}
	if !it.checked || seq == it.want {
		it.want = seq + 1
		return true
	}
	first, last := it.want, seq-1
	ok := false
	if it.snap != nil && seq > it.want {
		// The run of the gap: the one that starts at it, or, where the scan
		// starts, the one that ends at it.
		g, found, err := getGap(it.snap, first, false)
		if err == nil && !found && first == it.lo {
			g, found, err = getGap(it.snap, last, true)
		}
		if err != nil {
			it.err = err
			return false
		}
		ok = found && g.last == last && (g.first == first || first == it.lo && g.first < first)
	}
	if !ok {
		it.err = fmt.Errorf("%w: %s missing from the log, and no compaction removed them", ErrCorrupt, seqsName(first, last))
		return false
	}
	it.gap, it.want = gapRun{first, last}, seq+1
	return true
}

// seqsName names seqs first..last in errors.
func seqsName(first, last uint64) string {
	if first == last {
		return fmt.Sprintf("seq %d", first)
	}
	return fmt.Sprintf("seqs %d..%d", first, last)
}

// Compacted returns the seqs a compaction removed just before the current
// event, if any: on a scan of the whole log (no index, no time window without
// ReadAhead), which checks that every gap it meets is one. A fold skips them
// (projection.Table.Skip).
func (it *Iter) Compacted() (first, last uint64, ok bool) {
	return it.gap.first, it.gap.last, it.gap.last != 0
}

func (it *Iter) matches() bool {
	e, q := &it.ev, &it.q
	return (q.Type == 0 || e.Type == q.Type) &&
		(q.Job == "" || e.Job == q.Job) &&
		(q.Worker == "" || e.Worker == q.Worker) &&
		(q.Since == 0 || e.Time >= q.Since) &&
		(q.Until == 0 || e.Time < q.Until)
}

// Event returns the current event. It aliases the iterator's memory and is
// valid until the next call to Next; Clone it to keep it.
func (it *Iter) Event() *event.Event { return &it.ev }

// Err returns the error that stopped the iteration, if any.
func (it *Iter) Err() error { return it.err }

// Close releases the iterator. It returns the iteration error, if any.
func (it *Iter) Close() error {
	if it.ahead != nil {
		it.ahead.stop()
	}
	var errs []error
	if it.index != nil {
		errs = append(errs, it.index.Close())
	}
	if it.events != nil {
		errs = append(errs, it.events.Close())
	}
	if it.snap != nil && it.ownSnap {
		errs = append(errs, it.snap.Close())
	}
	if it.err != nil {
		return it.err // Pebble's iterators repeat it on Close
	}
	if err := errors.Join(errs...); err != nil {
		return it.readErr(err)
	}
	return nil
}

// Get returns the event with sequence number seq, copied. An event is
// visible once the batch that wrote it is staged (as an archive record is:
// see Archived); on a closed log Get returns ErrClosed.
func (l *Log) Get(seq uint64) (event.Event, error) {
	done, err := l.reading()
	if err != nil {
		return event.Event{}, err
	}
	defer done()
	v, closer, err := l.db.Get(eventKey(nil, seq))
	if errors.Is(err, pebble.ErrNotFound) {
		return event.Event{}, fmt.Errorf("eventlog: seq %d: %w", seq, ErrNotFound)
	}
	if err != nil {
		return event.Event{}, fmt.Errorf("eventlog: get seq %d: %w", seq, err)
	}
	defer closer.Close()
	return event.Decode(seq, v)
}

// ErrNotFound is returned by Get for a sequence number the log does not hold.
var ErrNotFound = errors.New("eventlog: not found")
