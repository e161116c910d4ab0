package eventlog_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
)

func openDisk(t testing.TB, dir string, readOnly bool) *eventlog.Log {
	t.Helper()
	l, err := eventlog.Open(dir, eventlog.Options{Logger: zerolog.Nop(), ReadOnly: readOnly})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestCheckpointHoldsEveryAcknowledgedEvent: copies taken while eight
// appenders go on each hold every event acknowledged before the copy began,
// with its content, and a gap-free log up to their last; each opens for
// writing (no lock came with it) and holds no alive mark.
func TestCheckpointHoldsEveryAcknowledgedEvent(t *testing.T) {
	root := t.TempDir()
	src := openDisk(t, filepath.Join(root, "data"), false)
	defer src.Close()
	if err := src.PutAlive(1); err != nil {
		t.Fatal(err)
	}
	var acked atomic.Uint64 // the highest seq an Append has returned
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				evs := beat(w*1_000_000 + i)
				if err := src.Append(evs); err != nil {
					t.Error(err)
					return
				}
				for cur := acked.Load(); cur < evs[0].Seq && !acked.CompareAndSwap(cur, evs[0].Seq); cur = acked.Load() {
				}
			}
		}()
	}
	var infos []eventlog.CheckpointInfo
	for i := range 4 {
		testutil.Eventually(t, 10*time.Second, "the appenders get ahead", func() bool { return acked.Load() >= uint64(100*(i+1)) })
		before := acked.Load()
		dir := filepath.Join(root, "copy"+string(rune('a'+i)))
		info, err := src.Checkpoint(dir)
		if err != nil {
			t.Fatal(err)
		}
		if info.Durable < before || info.Seq < info.Durable || info.Files == 0 || info.Bytes == 0 {
			t.Fatalf("copy %d: %+v, acknowledged before it %d", i, info, before)
		}
		infos = append(infos, info)
	}
	close(stop)
	wg.Wait()

	for i, info := range infos {
		dir := filepath.Join(root, "copy"+string(rune('a'+i)))
		if _, err := os.Stat(filepath.Join(dir, "alive")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("copy %d holds the alive mark: %v", i, err)
		}
		cp := openDisk(t, dir, false) // writable: the copy is not locked
		got := collect(t, cp.Query(eventlog.Query{}))
		if len(got) == 0 || got[len(got)-1].Seq != info.Seq {
			t.Fatalf("copy %d ends at %v, said %d", i, seqs(got[max(0, len(got)-1):]), info.Seq)
		}
		for j, e := range got {
			if e.Seq != uint64(j+1) {
				t.Fatalf("copy %d: seq %d at position %d", i, e.Seq, j)
			}
			want, err := src.Get(e.Seq)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(e, want) {
				t.Fatalf("copy %d: seq %d is %+v, the log's %+v", i, e.Seq, e, want)
			}
		}
		if _, ok, err := cp.Alive(); ok || err != nil {
			t.Errorf("copy %d: alive mark %v, %v; want none", i, ok, err)
		}
		if err := cp.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckpointRefusesATarget: a directory that is not empty, a file, a
// missing parent, the store's own directory or one inside it are refused
// with ErrTarget, and nothing is written anywhere; an empty directory takes
// the copy and keeps its permissions.
func TestCheckpointRefusesATarget(t *testing.T) {
	root := t.TempDir()
	src := openDisk(t, filepath.Join(root, "data"), false)
	defer src.Close()
	if err := src.Append(beat(1)); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(root, "full"), 0o755))
	must(os.WriteFile(filepath.Join(root, "full", "x"), []byte("mine"), 0o644))
	must(os.WriteFile(filepath.Join(root, "file"), []byte("mine"), 0o644))
	listing := func() []string {
		var out []string
		must(filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if rel, _ := filepath.Rel(root, p); filepath.Dir(rel) != "data" && rel != "data" { // the store changes as it runs
				out = append(out, rel)
			}
			return err
		}))
		return out
	}
	before := listing()
	for _, dir := range []string{
		filepath.Join(root, "full"),
		filepath.Join(root, "file"),
		filepath.Join(root, "missing", "copy"),
		filepath.Join(root, "data"),
		filepath.Join(root, "data", "copy"),
		filepath.Join(root, "data", "..", "data", "copy"),
	} {
		if _, err := src.Checkpoint(dir); !errors.Is(err, eventlog.ErrTarget) {
			t.Errorf("checkpoint into %s: %v, want ErrTarget", dir, err)
		}
		if after := listing(); !slices.Equal(after, before) {
			t.Fatalf("checkpoint into %s wrote:\n%v\nwas\n%v", dir, after, before)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "full", "x")); err != nil || string(b) != "mine" {
		t.Fatalf("a refused target changed: %q, %v", b, err)
	}

	empty := filepath.Join(root, "empty")
	must(os.Mkdir(empty, 0o700))
	must(os.Chmod(empty, 0o710)) // whatever the umask
	info, err := src.Checkpoint(empty)
	if err != nil || info.Seq != 1 {
		t.Fatalf("checkpoint into an empty directory: %+v, %v", info, err)
	}
	if fi, err := os.Stat(empty); err != nil || fi.Mode().Perm() != 0o710 {
		t.Fatalf("the copy's directory: %v, %v; want its mode kept, 0710", fi.Mode(), err)
	}
	if names, _ := filepath.Glob(filepath.Join(root, ".*")); len(names) > 0 {
		t.Fatalf("left behind: %v", names)
	}
}

// TestCheckpointRefusedOnAClosedOrReadOnlyLog: nothing to copy from.
func TestCheckpointRefusedOnAClosedOrReadOnlyLog(t *testing.T) {
	root := t.TempDir()
	l := openDisk(t, filepath.Join(root, "data"), false)
	if err := l.Append(beat(1)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Checkpoint(filepath.Join(root, "a")); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("closed: %v, want ErrClosed", err)
	}
	ro := openDisk(t, filepath.Join(root, "data"), true)
	defer ro.Close()
	if _, err := ro.Checkpoint(filepath.Join(root, "b")); err == nil {
		t.Errorf("read-only: no error")
	}
	if names, _ := os.ReadDir(root); len(names) != 1 {
		t.Errorf("written: %v", names)
	}
}

// TestCheckpointInMemory: the copy is made on the log's own filesystem.
func TestCheckpointInMemory(t *testing.T) {
	fs := vfs.NewMem()
	l := openMem(t, fs)
	defer l.Close()
	if err := l.Append([]event.Event{{Type: event.TypeQueued, Job: "j1", Kind: event.KindRun}}); err != nil {
		t.Fatal(err)
	}
	if info, err := l.Checkpoint("/backup"); err != nil || info.Seq != 1 {
		t.Fatalf("%+v, %v", info, err)
	}
	cp, err := eventlog.Open("/backup", eventlog.Options{FS: fs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if e, err := cp.Get(1); err != nil || e.Job != "j1" {
		t.Fatalf("the copy's seq 1: %+v, %v", e, err)
	}
}

func beat(i int) []event.Event {
	return []event.Event{{Type: event.TypeHeartbeat, Job: "j", Worker: "w", Lease: uint64(i + 1)}}
}
