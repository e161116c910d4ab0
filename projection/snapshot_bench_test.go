package projection

import "testing"

// BenchmarkRestore measures what a restart waits for once the store is
// open: restoring the table from a snapshot of a million jobs (every tenth
// acquired, the rest queued; queuedTable), and the snapshot that a daemon
// writes of it.
//
//	go test -run '^$' -bench BenchmarkRestore -benchtime 3x ./projection
func BenchmarkRestore(b *testing.B) {
	tab := million()
	snap := tab.Snapshot()
	b.Run("jobs=1000000/snapshot", func(b *testing.B) {
		for range b.N {
			tab.Snapshot()
		}
		b.ReportMetric(float64(len(snap))/(1<<20), "snapshot-MB")
	})
	b.Run("jobs=1000000/restore", func(b *testing.B) {
		for range b.N {
			if _, err := Restore(snap); err != nil {
				b.Fatal(err)
			}
		}
	})
}
