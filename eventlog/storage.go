package eventlog

import (
	"context"
	"errors"
	"fmt"
)

// CompactStorage has Pebble compact the whole keyspace into its bottom
// level, so that what the store takes on disk afterwards is what its data
// takes once compacted: no memtable, no overlapping tables, nothing
// overwritten or deleted left behind. It rewrites every table and the
// log's writes wait behind it: for measuring a store and for maintenance
// offline, not for a serving daemon.
func (l *Log) CompactStorage(ctx context.Context) error {
	if l.opts.ReadOnly {
		return errors.New("eventlog: compact the storage: the log is open read-only")
	}
	if err := l.db.Flush(); err != nil {
		return fmt.Errorf("eventlog: compact the storage: flush: %w", err)
	}
	if err := l.db.Compact(ctx, []byte{0}, []byte{0xff, 0xff}, true); err != nil {
		return fmt.Errorf("eventlog: compact the storage: %w", err)
	}
	return nil
}
