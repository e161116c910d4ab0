package eventlog

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
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
// filesystem is killed (SIGKILL) after its WALs have rotated and one has been
// recycled. Every WAL it left is sized ahead of its writes (a multiple of
// walGrowth), so the last one ends in zeros past its last record; the store
// opens with every event the process acknowledged, takes more, and opens
// again after a clean close with all of them.
func TestWALSizedAheadSurvivesAKill(t *testing.T) {
	if !canGrow {
		t.Skip("WALs are sized ahead only on Linux")
	}
	dir := t.TempDir()
	cmd := childCommand("walsize", dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked, reusedAt uint64
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "acked "); ok {
			acked, _ = strconv.ParseUint(n, 10, 64)
		} else if line == "reused" {
			reusedAt = acked
		} else {
			t.Fatalf("child: %s", line)
		}
		if reusedAt > 0 && acked >= reusedAt+100 { // into the recycled WAL
			break
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if reusedAt == 0 {
		t.Fatalf("the child acknowledged seq 1..%d and recycled no WAL", acked)
	}

	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) == 0 {
		t.Fatal("no WAL left in the store")
	}
	for _, p := range logs {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() == 0 || fi.Size()%walGrowth != 0 {
			t.Errorf("%s is %d bytes: not sized ahead in steps of %d", filepath.Base(p), fi.Size(), walGrowth)
		}
	}

	check := func(l *Log, want uint64) {
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
	l, err := Open(dir, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("reopen after the kill: %v", err)
	}
	check(l, acked)
	last := l.LastSeq()
	for range 10 {
		evs := []event.Event{walSizeEvent(l.LastSeq() + 1)}
		if err := l.Append(evs); err != nil {
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
	check(l, last+10)
}

func walSizeJob(seq uint64) string { return fmt.Sprint("j", seq) }

// walSizeEvent is the event the walsize child appends as seq: its job names
// the seq, so that the parent can tell each one is where it should be.
func walSizeEvent(seq uint64) event.Event {
	return event.Event{Type: event.TypeQueued, Job: walSizeJob(seq), Kind: event.KindRun,
		Spec: []byte(`{"pad":"` + strings.Repeat("x", 1<<10) + `"}`)}
}

// walSizeChild appends until killed, printing "acked N" for each append
// that returned, and "reused" once Pebble has recycled a WAL: with a small
// memtable, WALs rotate every few hundred events.
func walSizeChild(dir string) {
	fs := &reuseWatch{FS: vfs.Default}
	l, err := Open(dir, Options{FS: fs, Logger: zerolog.Nop(), memTableSize: 256 << 10})
	if err != nil {
		fmt.Println(err)
		return
	}
	told := false
	for seq := uint64(1); ; seq++ {
		if err := l.Append([]event.Event{walSizeEvent(seq)}); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("acked", seq)
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
