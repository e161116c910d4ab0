package eventlog

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
)

// TestWALSizedAheadSurvivesAKill: a process appending to a store on the OS
// filesystem is killed (SIGKILL) twice: once while it writes its first WAL,
// whose size runs ahead of its records, so that zeros follow the last one;
// then, on the same store, after its WALs have rotated and one has been
// recycled. Each time the store opens with every event the process
// acknowledged; it then takes more, and opens again after a clean close
// with all of them.
func TestWALSizedAheadSurvivesAKill(t *testing.T) {
	if !canGrow {
		t.Skip("WALs are sized ahead only on Linux")
	}
	dir := t.TempDir()

	acked, walSize := killChild(t, dir, func(acked, walSize, _ uint64) bool { return walSize > 0 && acked >= 50 })
	// One event is about 1 KiB; Pebble's preallocation, with the child's
	// 256 KiB memtable, 110% of it.
	if walSize < 64<<10 {
		t.Errorf("the WAL was %d bytes after one event: its size did not run ahead", walSize)
	}
	l, err := Open(dir, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("reopen after the first kill: %v", err)
	}
	checkWALSizeEvents(t, l, acked)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	acked, _ = killChild(t, dir, func(acked, _, reusedAt uint64) bool { return reusedAt > 0 && acked >= reusedAt+100 })
	if l, err = Open(dir, Options{Logger: zerolog.Nop()}); err != nil {
		t.Fatalf("reopen after the second kill: %v", err)
	}
	checkWALSizeEvents(t, l, acked)
	last := l.LastSeq()
	for range 10 {
		if err := l.Append([]event.Event{walSizeEvent(l.LastSeq() + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = Open(dir, Options{Logger: zerolog.Nop()}); err != nil {
		t.Fatalf("reopen after a clean close: %v", err)
	}
	defer l.Close()
	checkWALSizeEvents(t, l, last+10)
}

// killChild runs the walsize child on dir until enough says so, given the
// last seq it acknowledged, its first WAL's size after one event and the
// seq it had acknowledged when it first recycled a WAL (0: not yet); then
// kills it, and returns the first two.
func killChild(t *testing.T, dir string, enough func(acked, walSize, reusedAt uint64) bool) (acked, walSize uint64) {
	t.Helper()
	cmd := childCommand("walsize", dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	var reusedAt uint64
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "acked "); ok {
			acked, _ = strconv.ParseUint(n, 10, 64)
		} else if n, ok := strings.CutPrefix(line, "walsize "); ok {
			walSize, _ = strconv.ParseUint(n, 10, 64)
		} else if line == "reused" {
			reusedAt = acked
		} else {
			t.Fatalf("child: %s", line)
		}
		if enough(acked, walSize, reusedAt) {
			return acked, walSize
		}
	}
	t.Fatalf("the child ended after acknowledging seq %d (its first WAL %d bytes, recycled at %d): %v", acked, walSize, reusedAt, sc.Err())
	return 0, 0
}

// checkWALSizeEvents checks that l holds the walsize child's events, each
// at its seq, at least up to want.
func checkWALSizeEvents(t *testing.T, l *Log, want uint64) {
	t.Helper()
	it := l.Iter(1)
	var n uint64
	for it.Next() {
		n++
		if e := it.Event(); e.Seq != n || e.Job != walSizeJob(n) {
			t.Fatalf("event %d is seq %d of job %q, want job %q", n, e.Seq, e.Job, walSizeJob(n))
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if n < want {
		t.Fatalf("the store holds seq 1..%d; seq 1..%d were acknowledged", n, want)
	}
}

func walSizeJob(seq uint64) string { return fmt.Sprint("j", seq) }

// walSizeEvent is the event the walsize child appends as seq: its job names
// the seq, so that the parent can tell each one is where it should be.
func walSizeEvent(seq uint64) event.Event {
	return event.Event{Type: event.TypeQueued, Job: walSizeJob(seq), Kind: event.KindRun,
		Spec: []byte(`{"pad":"` + strings.Repeat("x", 1<<10) + `"}`)}
}

// walSizeChild appends to the store in dir until killed, printing "acked N"
// for each append that returned, "walsize N" with the size of its newest WAL
// after its first append, and "reused" once Pebble has recycled a WAL: with
// a small memtable, WALs rotate every few hundred events.
func walSizeChild(dir string) {
	fs := &reuseWatch{FS: vfs.Default}
	l, err := Open(dir, Options{FS: fs, Logger: zerolog.Nop(), memTableSize: 256 << 10})
	if err != nil {
		fmt.Println(err)
		return
	}
	first, told := true, false
	for {
		evs := []event.Event{walSizeEvent(l.LastSeq() + 1)}
		if err := l.Append(evs); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("acked", evs[0].Seq)
		if first {
			first = false
			logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
			slices.Sort(logs) // numbered, of one width
			fi, err := os.Stat(logs[len(logs)-1])
			if err != nil {
				fmt.Println(err)
				return
			}
			fmt.Println("walsize", fi.Size())
		}
		if !told && fs.reused.Load() {
			fmt.Println("reused")
			told = true
		}
	}
}

// reuseWatch notes that Pebble recycled a WAL.
type reuseWatch struct {
	vfs.FS
	reused atomic.Bool
}

func (fs *reuseWatch) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	if err == nil && category == walCategory {
		fs.reused.Store(true)
	}
	return f, err
}
