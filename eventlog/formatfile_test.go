package eventlog

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
)

// TestFormatFile: a writable open writes the format file; the next open
// trusts it and opens the store once (Pebble reads its MANIFEST once), where
// a missing or unusable file has it checked by a read-only open first (a
// second read); a file naming a newer format refuses the store before
// Pebble opens it.
func TestFormatFile(t *testing.T) {
	for _, c := range []struct {
		name      string
		file      []byte // written over the file before the reopen; nil: left as the first open wrote it
		remove    bool
		manifests int64 // the reopen's reads of the MANIFEST
		err       error
	}{
		{name: "trusted", manifests: 1},
		{name: "missing", remove: true, manifests: 2},
		{name: "empty", file: []byte{}, manifests: 2},
		{name: "two bytes", file: []byte{storeFormat, storeFormat}, manifests: 2},
		{name: "zero", file: []byte{0}, manifests: 2},
		{name: "newer", file: []byte{storeFormat + 1}, manifests: 0, err: ErrNewerFormat},
	} {
		t.Run(c.name, func(t *testing.T) {
			var manifests atomic.Int64
			mem := vfs.NewMem()
			fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
				if op.Kind == errorfs.OpOpen && strings.Contains(op.Path, "MANIFEST") {
					manifests.Add(1)
				}
				return nil
			}))
			opts := Options{FS: fs, Logger: zerolog.Nop()}
			l, err := Open("data", opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Append([]event.Event{{Type: event.TypeHeartbeat, Job: "j", Worker: "w", Lease: 1}}); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if v, ok := readFormatFile(mem, "data"); !ok || v != storeFormat {
				t.Fatalf("after the first open, the format file holds %d (%v), want %d", v, ok, storeFormat)
			}
			path := mem.PathJoin("data", formatFile)
			if c.remove {
				if err := mem.Remove(path); err != nil {
					t.Fatal(err)
				}
			}
			if c.file != nil {
				f, err := mem.Create(path, vfs.WriteCategoryUnspecified)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.Write(c.file); err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
			manifests.Store(0)
			l, err = Open("data", opts)
			if got := manifests.Load(); got != c.manifests {
				t.Errorf("the reopen read the MANIFEST %d times, want %d", got, c.manifests)
			}
			if c.err != nil {
				if !errors.Is(err, c.err) || !strings.Contains(err.Error(), formatFile) {
					t.Fatalf("reopen: %v, want %v naming the file %s", err, c.err, formatFile)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if v, ok := readFormatFile(mem, "data"); !ok || v != storeFormat {
				t.Errorf("after the reopen, the format file holds %d (%v), want %d", v, ok, storeFormat)
			}
			if e, err := l.Get(1); err != nil || e.Lease != 1 {
				t.Errorf("seq 1 after the reopen: %+v, %v", e, err)
			}
		})
	}
}
