package eventlog

import (
	"context"
	"errors"
	"fmt"
	"github.com/leaselog/leaselog/event"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/rs/zerolog"
)

// faultFS is a MemFS behind an errorfs injector that fails the operations
// inject selects, once armed.
type faultFS struct {
	mem    *vfs.MemFS
	armed  atomic.Bool
	inject func(op errorfs.Op) bool
	hits   atomic.Int64
}

func newFaultFS(inject func(op errorfs.Op) bool) *faultFS {
	return &faultFS{mem: vfs.NewMem(), inject: inject}
}

func (f *faultFS) fs() vfs.FS {
	return errorfs.Wrap(f.mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if f.armed.Load() && f.inject(op) {
			f.hits.Add(1)
			return errorfs.ErrInjected
		}
		return nil
	}))
}

func isWAL(op errorfs.Op) bool { return strings.HasSuffix(op.Path, ".log") }

func isSync(op errorfs.Op) bool {
	return op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
}

// fatals records what OnFatal was told, and returns: a test's OnFatal may.
type fatals struct {
	mu   sync.Mutex
	msgs []string
}

func (f *fatals) onFatal(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, msg)
}

func (f *fatals) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.msgs, "; ")
}

func openFault(t *testing.T, f *faultFS, fat *fatals, opts Options) *Log {
	t.Helper()
	opts.FS, opts.OnFatal, opts.Logger = f.fs(), fat.onFatal, zerolog.Nop()
	l, err := Open("data", opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func heartbeat(i int) []event.Event {
	return []event.Event{{Type: event.TypeHeartbeat, Job: "j", Worker: "w", Lease: uint64(i + 1)}}
}

// checkFailStop checks that l refuses every write with ErrFailed, wakes a
// reader waiting for durability, and closes without hanging.
func checkFailStop(t *testing.T, l *Log) {
	t.Helper()
	if err := l.Append(heartbeat(99)); !errors.Is(err, ErrFailed) {
		t.Errorf("append after the failure: %v, want ErrFailed", err)
	}
	if _, err := l.Stage(heartbeat(99), nil); !errors.Is(err, ErrFailed) {
		t.Errorf("stage after the failure: %v, want ErrFailed", err)
	}
	if err := l.PutSnapshot(l.DurableSeq(), []byte("x")); !errors.Is(err, ErrFailed) {
		t.Errorf("snapshot after the failure: %v, want ErrFailed", err)
	}
	if err := l.WaitDurable(context.Background(), l.LastSeq()+1); !errors.Is(err, ErrFailed) {
		t.Errorf("wait for durability after the failure: %v, want ErrFailed", err)
	}
	if err := l.Close(); !errors.Is(err, ErrFailed) {
		t.Errorf("close of a failed log: %v, want its failure", err)
	}
}

// reopen opens the store on the MemFS under the injector, as the next start
// would, and returns the seqs it holds.
func reopen(t *testing.T, f *faultFS) uint64 {
	t.Helper()
	l, err := Open("data", Options{FS: f.mem, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.LastSeq()
}

func TestWALErrorsFailTheLog(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inject func(errorfs.Op) bool
	}{
		{"sync", func(op errorfs.Op) bool { return isWAL(op) && isSync(op) }},
		{"write", func(op errorfs.Op) bool { return isWAL(op) && op.Kind == errorfs.OpFileWrite }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, fat := newFaultFS(tc.inject), &fatals{}
			l := openFault(t, f, fat, Options{})
			for i := range 3 {
				if err := l.Append(heartbeat(i)); err != nil {
					t.Fatal(err)
				}
			}
			f.armed.Store(true)
			err := l.Append(heartbeat(3))
			if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "seq 4..4") || !strings.Contains(err.Error(), "injected") {
				t.Fatalf("append on a failing WAL: %v, want ErrFailed naming seq 4 and the cause", err)
			}
			if l.DurableSeq() != 3 {
				t.Errorf("durable seq %d after the failure, want 3", l.DurableSeq())
			}
			// The disk recovers: the log must not.
			f.armed.Store(false)
			checkFailStop(t, l)
			if got := reopen(t, f); got < 3 {
				t.Errorf("after a restart the log ends at seq %d; seq 1..3 were acknowledged", got)
			}
		})
	}
}

// TestSnapshotSyncErrorFailsTheLog: a snapshot shares the WAL with the
// events; when its sync fails, so does the log.
func TestSnapshotSyncErrorFailsTheLog(t *testing.T) {
	f, fat := newFaultFS(func(op errorfs.Op) bool { return isWAL(op) && isSync(op) }), &fatals{}
	l := openFault(t, f, fat, Options{})
	if err := l.Append(heartbeat(0)); err != nil {
		t.Fatal(err)
	}
	f.armed.Store(true)
	if err := l.PutSnapshot(1, []byte("table")); !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "snapshot at seq 1") {
		t.Fatalf("snapshot on a failing WAL: %v, want ErrFailed naming the snapshot", err)
	}
	f.armed.Store(false)
	checkFailStop(t, l)
}

// TestFailureWakesWaiters: a reader waiting for an event to become durable
// is told when the log fails, rather than waiting for a sync that will never
// come (for ever, when it waits without a deadline, as a snapshot does).
func TestFailureWakesWaiters(t *testing.T) {
	l, err := Open("data", Options{FS: vfs.NewMem(), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.waitMu.Lock()
	ch := l.waitCh // what a waiter blocked in WaitDurable selects on
	l.waitMu.Unlock()
	l.fail(errors.New("disk on fire"), false)
	select {
	case <-ch:
	default:
		t.Fatal("failing the log did not wake the waiters")
	}
	if err := l.WaitDurable(context.Background(), 1); !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("WaitDurable on a failed log: %v", err)
	}
}

// TestNothingAcknowledgedAfterFailure: a commit staged before the log failed
// (here: a Fatalf from a background flush, say) is not acknowledged after it,
// even if its own sync succeeds.
func TestNothingAcknowledgedAfterFailure(t *testing.T) {
	l, err := Open("data", Options{FS: vfs.NewMem(), Logger: zerolog.Nop(), OnFatal: func(string) {}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.Stage(heartbeat(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	l.fatal("MANIFEST sync failed: disk on fire")
	if err := c.Wait(); !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("Wait of a commit staged before the failure: %v, want the failure", err)
	}
	if l.DurableSeq() != 0 {
		t.Fatalf("durable seq %d after the failure, want 0", l.DurableSeq())
	}
	checkFailStop(t, l)
}

// TestPebblePanicFailsTheLog: once Pebble's WAL writer has failed, a commit
// that raced the failure into the pipeline makes Pebble panic (commitWrite)
// with its commit pipeline's mutex held. The log must turn that into
// ErrFailed, never call into the pipeline again (it would block for ever),
// and close without closing Pebble (whose Close takes that mutex).
func TestPebblePanicFailsTheLog(t *testing.T) {
	f, fat := newFaultFS(func(op errorfs.Op) bool { return isWAL(op) && op.Kind == errorfs.OpFileWrite }), &fatals{}
	l := openFault(t, f, fat, Options{})
	if err := l.Append(heartbeat(0)); err != nil {
		t.Fatal(err)
	}
	f.armed.Store(true)
	if err := l.Append(heartbeat(1)); !errors.Is(err, ErrFailed) {
		t.Fatalf("append on a failing WAL: %v", err)
	}
	// Commits that entered the pipeline before the log saw the failure: clear
	// the sticky error, as if they had been staged a moment earlier. Large
	// records fill the WAL writer's blocks, which is when it takes up the
	// failure and starts refusing records, by panicking.
	big := []event.Event{{Type: event.TypeQueued, Job: "big", Kind: event.KindRun, Spec: []byte(strings.Repeat("x", 40<<10))}}
	var err error
	for i := 0; i < 20 && !strings.Contains(fmt.Sprint(err), "panicked"); i++ {
		l.failure.Store(nil)
		var c *Commit
		if c, err = l.Stage(big, nil); err == nil {
			err = c.Wait()
		}
	}
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("no panic from Pebble after 20 large commits on a failed WAL; last: %v", err)
	}
	if !l.wedged.Load() {
		t.Fatal("a panic in Pebble's commit pipeline did not mark it unusable")
	}
	f.armed.Store(false)
	checkFailStop(t, l) // would hang, were the pipeline called again
}

// TestFatalfFailsTheLog: Pebble calls Logger.Fatalf when it cannot record a
// flush in its MANIFEST. The log fails before OnFatal is told, so that nothing
// is acknowledged after it even if OnFatal returns (as here); Pebble then
// carries on, and the log never calls its write path again.
func TestFatalfFailsTheLog(t *testing.T) {
	f, fat := newFaultFS(func(op errorfs.Op) bool { return strings.Contains(op.Path, "MANIFEST") && isSync(op) }), &fatals{}
	l := openFault(t, f, fat, Options{})
	for i := range 3 {
		if err := l.Append(heartbeat(i)); err != nil {
			t.Fatal(err)
		}
	}
	f.armed.Store(true)
	// Pebble retries a failed flush at once, and for ever: the flush waits
	// until the disk recovers.
	flushed := make(chan error, 1)
	go func() { flushed <- l.db.Flush() }()
	if err := l.WaitDurable(context.Background(), l.LastSeq()+1); !errors.Is(err, ErrFailed) {
		t.Fatalf("waiting for the log to fail: %v", err)
	}
	f.armed.Store(false)
	<-flushed
	if !strings.Contains(fat.String(), "MANIFEST sync failed") {
		t.Fatalf("OnFatal was told %q, want the MANIFEST's failure", fat)
	}
	if err := l.Err(); !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "MANIFEST sync failed") {
		t.Fatalf("log error after Fatalf: %v", err)
	}
	f.armed.Store(false)
	checkFailStop(t, l)
}

// TestReadErrorsAreErrors injects read errors into the sstables and checks
// that every reader returns an error naming what it was reading, never a
// short answer that looks whole.
func TestReadErrorsAreErrors(t *testing.T) {
	f := newFaultFS(func(op errorfs.Op) bool {
		return strings.HasSuffix(op.Path, ".sst") && op.Kind.ReadOrWrite() == errorfs.OpIsRead
	})
	l, err := Open("data", Options{FS: f.fs(), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := l.Append([]event.Event{{Type: event.TypeQueued, Job: fmt.Sprint("j", i), Kind: event.KindRun}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.PutSnapshot(50, []byte("table")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// The next open flushes what the WAL holds into an sstable, whose reads
	// then fail: with no room in the block cache, every read is the file's.
	l, err = Open("data", Options{FS: f.fs(), Logger: zerolog.Nop(), CacheSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f.armed.Store(true)
	for _, q := range []Query{{}, {ReadAhead: true}, {Job: "j7"}, {Type: event.TypeQueued}, {After: 20}} {
		it := l.Query(q)
		n := 0
		for it.Next() {
			n++
		}
		if err := it.Close(); err == nil || !strings.Contains(err.Error(), "injected") || !strings.HasPrefix(err.Error(), "eventlog: ") {
			t.Errorf("query %+v: %d events, then %v; want an error naming the read", q, n, err)
		}
	}
	if _, err := l.Get(7); err == nil || !strings.Contains(err.Error(), "seq 7") {
		t.Errorf("Get(7): %v, want an error naming seq 7", err)
	}
	if _, err := l.Snapshot(50); err == nil || !strings.Contains(err.Error(), "snapshot") {
		t.Errorf("Snapshot(50): %v, want an error naming the snapshot", err)
	}
	if _, err := l.Snapshots(); err == nil {
		t.Error("Snapshots: no error")
	}
	var walked error
	err = l.EachSnapshot(func(_ uint64, _ []byte, err error) bool { walked = err; return true })
	if err == nil && walked == nil {
		t.Error("EachSnapshot: no error")
	}
	if f.hits.Load() == 0 {
		t.Fatal("no read reached an sstable: the test tests nothing")
	}
}

// TestOpenDirSyncErrorIsAnError: Pebble panics when a sync of the store's
// directory fails (atomicfs.Marker.Move), here while Open creates the store;
// Open returns that as an error, for the daemon to report, rather than crash.
func TestOpenDirSyncErrorIsAnError(t *testing.T) {
	f := newFaultFS(func(op errorfs.Op) bool { return op.Path == "data" && isSync(op) })
	f.armed.Store(true)
	l, err := Open("data", Options{FS: f.fs(), Logger: zerolog.Nop(), OnFatal: func(string) {}})
	if err == nil {
		l.Close()
		t.Fatal("open with a failing directory sync succeeded")
	}
	if !strings.Contains(err.Error(), "eventlog: open data: pebble panicked: injected error") {
		t.Fatalf("open with a failing directory sync: %v", err)
	}
	if f.hits.Load() == 0 {
		t.Fatal("no directory sync failed: the test tests nothing")
	}
}

// TestWALReadErrorFailsOpen: a WAL that cannot be read on open fails the
// open, naming the store; it never opens a log that is missing its tail.
func TestWALReadErrorFailsOpen(t *testing.T) {
	f := newFaultFS(func(op errorfs.Op) bool { return isWAL(op) && op.Kind.ReadOrWrite() == errorfs.OpIsRead })
	l, err := Open("data", Options{FS: f.fs(), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := l.Append(heartbeat(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	f.armed.Store(true)
	for _, ro := range []bool{false, true} {
		if l, err := Open("data", Options{FS: f.fs(), Logger: zerolog.Nop(), ReadOnly: ro}); err == nil {
			l.Close()
			t.Errorf("read-only=%v: open with an unreadable WAL succeeded", ro)
		} else if !strings.Contains(err.Error(), "eventlog: open data") || !strings.Contains(err.Error(), "injected") {
			t.Errorf("read-only=%v: %v, want an error naming the store and the cause", ro, err)
		}
	}
}
