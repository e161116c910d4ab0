package eventlog

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/leaselog/leaselog/event"
	"github.com/rs/zerolog"
)

// BenchmarkOpenAfterCrash measures the open of a store whose last events
// are in its write-ahead log only, as a crash leaves them (Pebble replays
// the log at open): check=file is Open of a store with its format file
// (formatfile.go), which the check reads; check=read-only is Open of a
// store without one, which first opens it read-only to check its format
// before anything is written (checkReadable), and so replays the log twice;
// check=off is the open for writing alone.
//
//	go test -run '^$' -bench BenchmarkOpenAfterCrash -benchtime 3x ./eventlog
func BenchmarkOpenAfterCrash(b *testing.B) {
	const events = 200_000
	src := filepath.Join(b.TempDir(), "store")
	l, err := Open(src, Options{Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]event.Event, 100)
	for i := 0; i < events; i += len(batch) {
		for j := range batch {
			batch[j] = benchEvent(i + j)
		}
		if err := l.Append(batch); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Close(); err != nil { // a close leaves the memtable unflushed, as a crash would
		b.Fatal(err)
	}
	for _, check := range []string{"file", "read-only", "off"} {
		b.Run(fmt.Sprintf("events=%d/check=%s", events, check), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				dir := filepath.Join(b.TempDir(), "store")
				if out, err := exec.Command("cp", "-r", src, dir).CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
				if check == "read-only" {
					if err := os.Remove(filepath.Join(dir, formatFile)); err != nil {
						b.Fatal(err)
					}
				}
				opts := Options{Logger: zerolog.Nop(), FS: vfs.Default, KeepSnapshots: 3, memTableSize: 64 << 20, OnFatal: func(string) {}}
				b.StartTimer()
				if check != "off" {
					if err := checkReadable(dir, opts); err != nil {
						b.Fatal(err)
					}
				}
				l, err := open(dir, opts)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if l.LastSeq() != events {
					b.Fatalf("opened at seq %d, want %d", l.LastSeq(), events)
				}
				l.Close()
			}
		})
	}
}
