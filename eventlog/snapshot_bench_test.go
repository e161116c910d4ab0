package eventlog

import (
	"math/rand"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leaselog/leaselog/event"
)

// BenchmarkSnapshots lists the snapshots of a store holding three of 32 MB
// (a table of some 300,000 jobs): impl=store reads the list from Pebble, as
// every listing did before the log kept it; impl=kept is Snapshots, what
// CompactJob pays for each job it compacts.
func BenchmarkSnapshots(b *testing.B) {
	l, err := Open("data", Options{FS: vfs.NewMem(), KeepSnapshots: 3})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	data := make([]byte, 32<<20)
	rng := rand.New(rand.NewSource(1))
	for i := range data {
		data[i] = byte('a' + rng.Intn(16)) // compressible, as a table's bytes are
	}
	for range 3 {
		if err := l.Append([]event.Event{{Type: event.TypeDaemonStarted}}); err != nil {
			b.Fatal(err)
		}
		if err := l.PutSnapshot(l.LastSeq(), data); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.db.Flush(); err != nil { // into tables: compressed blocks, as on a daemon's store
		b.Fatal(err)
	}
	for _, impl := range []struct {
		name string
		list func() ([]uint64, error)
	}{{"store", l.listSnapshots}, {"kept", l.Snapshots}} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			for b.Loop() {
				if seqs, err := impl.list(); err != nil || len(seqs) != 3 {
					b.Fatalf("%v, %v", seqs, err)
				}
			}
		})
	}
}
