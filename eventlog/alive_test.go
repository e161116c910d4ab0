package eventlog_test

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
)

// TestAliveMark: a store has no mark until one is put; the last one put is
// the one read, by this log and by the next open of the store, read-only
// included; a read-only, closed or failed log puts none.
func TestAliveMark(t *testing.T) {
	fs := vfs.NewMem()
	l := openMem(t, fs)
	if at, ok, err := l.Alive(); ok || err != nil {
		t.Fatalf("a new store's mark: %d, %v, %v; want none", at, ok, err)
	}
	for _, at := range []int64{1_000, 5_000, 3_000} { // the last wins, even an earlier time
		if err := l.PutAlive(at); err != nil {
			t.Fatal(err)
		}
		if got, ok, err := l.Alive(); got != at || !ok || err != nil {
			t.Fatalf("after PutAlive(%d): %d, %v, %v", at, got, ok, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.PutAlive(4_000); !errors.Is(err, eventlog.ErrClosed) {
		t.Fatalf("PutAlive on a closed log: %v, want ErrClosed", err)
	}

	ro, err := eventlog.Open("data", eventlog.Options{FS: fs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok, err := ro.Alive(); got != 3_000 || !ok || err != nil {
		t.Fatalf("the mark read-only after a reopen: %d, %v, %v; want 3000", got, ok, err)
	}
	if err := ro.PutAlive(6_000); err == nil {
		t.Fatal("PutAlive on a read-only log succeeded")
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAliveMarkSurvivesAProcessKill: the mark is in the OS once PutAlive
// returns, with no sync: a crash that keeps what was written (a process
// killed; its host runs on) keeps it, however quiet the store was. One that
// keeps only what was synced (a host that lost power) may lose it, which
// only makes the next start count a longer absence.
func TestAliveMarkSurvivesAProcessKill(t *testing.T) {
	fs := vfs.NewCrashableMem()
	l := openMem(t, fs)
	if err := l.Append([]event.Event{{Type: event.TypeDaemonStarted}}); err != nil {
		t.Fatal(err)
	}
	const at = 7_000_000_000
	if err := l.PutAlive(at); err != nil {
		t.Fatal(err)
	}
	killed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))})
	powerLost := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		fs   vfs.FS
		want bool
	}{{"process killed", killed, true}, {"power lost", powerLost, false}} {
		l := openMem(t, tc.fs)
		got, ok, err := l.Alive()
		if err != nil || ok != tc.want || (ok && got != at) {
			t.Errorf("%s: the mark is %d, %v, %v; want %d: %v", tc.name, got, ok, err, int64(at), tc.want)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAliveMarkCorrupt: bytes that cannot be a mark are an error naming the
// file, never a panic nor a time; an empty file (created, then its data lost
// with the power) is no mark.
func TestAliveMarkCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bytes []byte
		err   bool
	}{
		{"empty", nil, false},
		{"short", []byte{1, 2, 3}, true},
		{"long", make([]byte, 13), true},
		{"checksum", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			l := openMem(t, fs)
			defer l.Close()
			f, err := fs.Create("data/alive", vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			at, ok, err := l.Alive()
			if ok {
				t.Fatalf("%x read as the mark %d", tc.bytes, at)
			}
			if tc.err != (err != nil) || (err != nil && (!errors.Is(err, eventlog.ErrCorrupt) || !strings.Contains(err.Error(), "data/alive"))) {
				t.Fatalf("%x: %v; want an error: %v, wrapping ErrCorrupt and naming data/alive", tc.bytes, err, tc.err)
			}
		})
	}
}

// BenchmarkPutAlive is the cost of one alive mark on the OS filesystem: a
// write system call, no sync (the sweeper writes one a sweep, at most one a
// second at renew_seconds ≥ 2).
func BenchmarkPutAlive(b *testing.B) {
	l, err := eventlog.Open(b.TempDir(), eventlog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := l.PutAlive(int64(i)); err != nil {
			b.Fatal(err)
		}
	}
}
