package eventlog

import "context"

// Settle flushes Pebble's memtable and compacts its whole keyspace, as its
// background compactions do in their own time: what was deleted is then
// gone from the disk, and the files are as a long-lived store holds them.
// For the benchmarks of the external test package, which measure the disk.
func (l *Log) Settle() error {
	if err := l.db.Flush(); err != nil {
		return err
	}
	return l.db.Compact(context.Background(), []byte{0}, []byte{0xff, 0xff}, true)
}
