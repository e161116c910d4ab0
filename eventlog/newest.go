package eventlog

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/leaselog/leaselog/event"
)

// Newest calls fn, newest first, with the seq of each durable event of
// type typ whose seq is below before (0: no bound), from the type index
// alone: no event is read, so a walk costs the keys it passes. fn returning
// false stops the walk. It is how a list is read newest first (the jobs by
// their submissions, lease.queued) without a second index.
func (l *Log) Newest(typ event.Type, before uint64, fn func(seq uint64) bool) error {
	done, err := l.reading()
	if err != nil {
		return err
	}
	defer done()
	upper := l.durable.Load() + 1
	if before != 0 && before < upper {
		upper = before
	}
	it, err := l.db.NewIter(&pebble.IterOptions{
		LowerBound: typeIndexPrefix(nil, typ),
		UpperBound: typeIndexKey(nil, typ, upper),
	})
	if err != nil {
		return fmt.Errorf("eventlog: walk the index of type %s: %w", typ, err)
	}
	for ok := it.Last(); ok; ok = it.Prev() {
		seq, err := seqSuffix(it.Key())
		if err != nil {
			it.Close()
			return fmt.Errorf("eventlog: the index of type %s: %w", typ, err)
		}
		if !fn(seq) {
			break
		}
	}
	if err := it.Error(); err != nil {
		it.Close()
		return fmt.Errorf("eventlog: walk the index of type %s: %w", typ, err)
	}
	return it.Close()
}
