package eventlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// The runs of compacted seqs (compact.go): each run of consecutive seqs that
// compactions removed, merged with the runs beside it, under its first seq
// and its last, so that a gap between two events left is exactly one run and
// every lookup of one is a point read:
//
//	'g' first(8) -> last(8)
//	'G' last(8)  -> first(8)

// gapRun is seqs first..last, a run of compacted seqs.
type gapRun struct{ first, last uint64 }

// gapOf returns the run of compacted seqs that starts at seq, or with byEnd
// the one that ends at it, if get finds its key.
func gapOf(seq uint64, byEnd bool, get func(key []byte) ([]byte, bool, error)) (gapRun, bool, error) {
	key := gapKey(nil, seq)
	if byEnd {
		key = gapEndKey(nil, seq)
	}
	v, ok, err := get(key)
	if err != nil || !ok {
		return gapRun{}, false, err
	}
	if len(v) != 8 {
		return gapRun{}, false, fmt.Errorf("%w: compaction key %q holds %d bytes, want 8", ErrCorrupt, key, len(v))
	}
	g := gapRun{first: seq, last: binary.BigEndian.Uint64(v)}
	if byEnd {
		g = gapRun{first: g.last, last: seq}
	}
	if g.last < g.first {
		return gapRun{}, false, fmt.Errorf("%w: compaction key %q names seqs %d..%d", ErrCorrupt, key, g.first, g.last)
	}
	return g, true, nil
}

// getGap is gapOf read from r.
func getGap(r pebble.Reader, seq uint64, byEnd bool) (gapRun, bool, error) {
	return gapOf(seq, byEnd, func(key []byte) ([]byte, bool, error) {
		v, closer, err := r.Get(key)
		if errors.Is(err, pebble.ErrNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("eventlog: read compaction key %q: %w", key, err)
		}
		defer closer.Close()
		return slices.Clone(v), true, nil
	})
}

// addGaps writes into b the runs of compacted seqs once seqs (sorted) are
// compacted too: each joins the runs beside it, so that a gap between two
// events left is always exactly one run, under its first seq and its last.
func addGaps(b *pebble.Batch, pr *probes, seqs []uint64) error {
	var runs []gapRun
	for _, x := range seqs {
		if n := len(runs); n > 0 && runs[n-1].last+1 == x {
			runs[n-1].last = x
		} else {
			runs = append(runs, gapRun{x, x})
		}
	}
	var stale []gapRun // the runs joined: their keys go
	for i := range runs {
		r := &runs[i]
		if pr.found[r.first-1] {
			// An event: no run ends there.
		} else if g, ok, err := pr.gap(r.first-1, true); err != nil {
			return err
		} else if ok {
			r.first = g.first
			stale = append(stale, g)
		}
		if pr.found[r.last+1] {
		} else if g, ok, err := pr.gap(r.last+1, false); err != nil {
			return err
		} else if ok {
			r.last = g.last
			stale = append(stale, g)
		}
	}
	// Runs that grew into each other (a run between two of seqs) are one.
	merged := runs[:0]
	for _, r := range runs {
		if n := len(merged); n > 0 && r.first <= merged[n-1].last+1 {
			merged[n-1].last = max(merged[n-1].last, r.last)
		} else {
			merged = append(merged, r)
		}
	}
	for _, g := range stale {
		if err := errors.Join(b.Delete(gapKey(nil, g.first), nil), b.Delete(gapEndKey(nil, g.last), nil)); err != nil {
			return err
		}
	}
	for _, r := range merged {
		if err := errors.Join(b.Set(gapKey(nil, r.first), binary.BigEndian.AppendUint64(nil, r.last), nil),
			b.Set(gapEndKey(nil, r.last), binary.BigEndian.AppendUint64(nil, r.first), nil)); err != nil {
			return err
		}
	}
	return nil
}

// readGap reads the run of compacted seqs a scan of them is on.
func readGap(it *pebble.Iterator) (gapRun, error) {
	key := it.Key()
	if len(key) != 9 {
		return gapRun{}, fmt.Errorf("%w: compaction key %q has the wrong length", ErrCorrupt, key)
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return gapRun{}, fmt.Errorf("eventlog: read compaction key %q: %w", key, err)
	}
	g := gapRun{first: binary.BigEndian.Uint64(key[1:])}
	if len(v) != 8 {
		return gapRun{}, fmt.Errorf("%w: compaction key %q holds %d bytes, want 8", ErrCorrupt, key, len(v))
	}
	if g.last = binary.BigEndian.Uint64(v); g.last < g.first {
		return gapRun{}, fmt.Errorf("%w: compaction key %q names seqs %d..%d", ErrCorrupt, key, g.first, g.last)
	}
	return g, nil
}

// ScanCompacted calls fn, in order, with every run of seqs compactions
// removed from the log, each checked against its key by its last seq (a
// run under one key and not the other is ErrCorrupt, naming it). For
// verification: Verify holds them to the gaps and to the summaries' claims.
func (l *Log) ScanCompacted(fn func(first, last uint64) error) error {
	done, err := l.reading()
	if err != nil {
		return err
	}
	defer done()
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixGap}, UpperBound: []byte{prefixGap + 1}})
	if err != nil {
		return fmt.Errorf("eventlog: scan the compactions: %w", err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		g, err := readGap(it)
		if err != nil {
			return err
		}
		if twin, ok, err := getGap(l.db, g.last, true); err != nil {
			return err
		} else if !ok || twin != g {
			return fmt.Errorf("%w: compaction key %q names seqs %d..%d, key %q does not", ErrCorrupt, it.Key(), g.first, g.last, gapEndKey(nil, g.last))
		}
		if err := fn(g.first, g.last); err != nil {
			return err
		}
		n++
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("eventlog: scan the compactions: %w", err)
	}
	ends, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixGapEnd}, UpperBound: []byte{prefixGapEnd + 1}})
	if err != nil {
		return fmt.Errorf("eventlog: scan the compactions: %w", err)
	}
	defer ends.Close()
	for ok := ends.First(); ok; ok = ends.Next() {
		if n--; n < 0 {
			return fmt.Errorf("%w: compaction key %q names a run no key by its first seq does", ErrCorrupt, ends.Key())
		}
	}
	return ends.Error()
}
