// Package eventlog is leaselog's only source of truth: an append-only log of
// lease events kept in Pebble. It stores the records of package event and
// owns the keyspace, the secondary indexes, snapshots, iteration, and the
// ordered group commit that makes appends durable. No other package imports
// Pebble.
//
// Key layout (one Pebble keyspace; integers big-endian so keys sort by number):
//
//	'm' "format"                       -> uvarint store format   (meta)
//	'm' "timeindex"                    -> 1                      (the time index is whole)
//	'e' seq(8)                         -> record                 (the log)
//	't' type(1) seq(8)                 -> empty                  (index by type)
//	'j' job 0x00 seq(8)                -> empty                  (index by job)
//	'w' worker 0x00 seq(8)             -> empty                  (index by worker)
//	's' seq(8)                         -> crc32c(4) snapshot     (projection snapshots)
//	'a' key                            -> value                  (the archive, see Record)
//	'c' second(8) seq(8)               -> empty                  (time index: runs by second)
//	'r' seq(8)                         -> second(8)              (time index: runs by seq)
//
// The time index (timeindex.go) names the first event of each run of events
// that fall in the same second, so that a query for a time window reads only
// the runs in it.
//
// An event and its index entries are written in one batch, so an index never
// names an event that is not there, and an event is never missing from the
// indexes that should name it. Sequence numbers start at 1 and have no gaps:
// they are assigned under one mutex in the order batches enter Pebble's commit
// pipeline, so the order of sequence numbers is the commit order and a crash
// can only lose a suffix of the log, never a hole in it.
//
// Append returns once the events are durable (fsynced). Concurrent appenders
// share fsyncs: each batch enters the commit pipeline without waiting for its
// sync (DB.ApplyNoSyncWait), and Pebble's WAL writer syncs everything queued at
// once; a sync that covers a batch covers every batch before it.
//
// The log is fail-stop. The first write that cannot be made durable (a failed
// WAL write or sync, a snapshot's included), a panic out of Pebble's commit
// pipeline, or Pebble's Logger.Fatalf fails it for good: every later write,
// and every Wait still pending, returns ErrFailed, readers waiting for
// durability are woken with it, and nothing more is acknowledged. Only a new
// Open, in practice a new process, recovers the durable prefix.
package eventlog

import (
	"context"
	"errors"
	"fmt"
	"github.com/leaselog/leaselog/event"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"
)

// ErrFailed is returned by every write after a write failed to become durable.
// The log is then fail-stopped: the caller must close it and reopen the store,
// which recovers exactly the durable prefix.
var ErrFailed = errors.New("eventlog: log failed; reopen to recover")

// ErrLocked is returned by Open when another process, or another Log in this
// one, has the store open: one writer per store.
var ErrLocked = errors.New("eventlog: store in use")

// ErrCorrupt is returned, wrapped with the key or sequence number at fault,
// when stored bytes cannot be what this package wrote. It is the record
// codec's own sentinel, so one errors.Is covers a bad record and a bad key.
var ErrCorrupt = event.ErrCorrupt

// ErrNewerFormat is returned when a record or the store was written by a newer
// format than this build reads.
var ErrNewerFormat = event.ErrNewerFormat

// ErrClosed is returned by calls on a closed log.
var ErrClosed = errors.New("eventlog: closed")

// MaxIDLen bounds job and worker ids, which are embedded in index keys.
const MaxIDLen = 256

// Options configures Open. The zero value is usable.
type Options struct {
	// FS is the filesystem the store lives on; nil means the OS filesystem.
	// Tests pass vfs.NewMem() or vfs.NewCrashableMem().
	FS vfs.FS
	// Logger receives Pebble's own messages (compactions at debug level).
	Logger zerolog.Logger
	// OnFatal is called when Pebble reports an unrecoverable storage error
	// through its Logger.Fatalf: a MANIFEST that cannot be written, synced or
	// made current (on open, after a flush or a compaction), a commit pipeline
	// that broke, corruption found by a read. By then the log has failed:
	// every later write returns ErrFailed and nothing more is acknowledged.
	// Pebble expects Fatalf not to return. If it does, Pebble carries on as if
	// the operation had succeeded: a failed flush is retried at once and for
	// ever (an Open waiting for it never returns), a broken commit is reported
	// applied but never syncs. The log never calls Pebble's write path again,
	// so a test may let OnFatal return; a daemon must not. The default logs
	// the failure, naming the store, and exits the process with ExitFatal.
	//
	// Some failures are not Fatalf but a Pebble panic on one of its own
	// goroutines, which no caller can recover: a WAL that cannot be rotated
	// when the memtable fills, a failed sync of the store's directory during a
	// flush. The process dies with Go's trace; nothing more is acknowledged,
	// and the next open recovers every acknowledged event.
	OnFatal func(msg string)
	// KeepSnapshots is how many snapshots PutSnapshot keeps; 0 means 3.
	KeepSnapshots int
	// ReadOnly opens the store for reading only (offline replay and verify).
	ReadOnly bool
	// OnCommit, if set, is told how long each durable commit took from entering
	// Pebble's commit pipeline to its fsync (Pebble's own commit statistics),
	// for metrics. It is called on the committer's goroutine and must be quick.
	OnCommit func(time.Duration)
	// CacheSize is the size in bytes of Pebble's block cache; 0 means Pebble's
	// default (8 MB). Tests set it tiny, so that every read reaches the files.
	CacheSize int64

	// memTableSize overrides Pebble's memtable size, so that tests in this
	// package can make Pebble rotate its WAL; 0 means the default.
	memTableSize uint64
}

// Log is an open event log. All methods are safe for concurrent use.
type Log struct {
	db   *pebble.DB
	opts Options

	mu struct {
		sync.Mutex
		next    uint64 // sequence number of the next event
		scratch []byte // encoding buffer, reused under mu
		closed  bool

		run runState // the run of the last event, for the time index
	}
	format   atomic.Int32 // the store's format as opened; storeFormat once upgraded
	inflight sync.WaitGroup

	// failure is sticky: set once, by the first write that could not be made
	// durable or by Pebble's Fatalf. It is an atomic, not guarded by mu,
	// because Pebble calls Fatalf from inside ApplyNoSyncWait on a goroutine
	// that holds mu, and because every append reads it: a healthy log pays a
	// load, not a lock.
	failure atomic.Pointer[error]
	// wedged: Pebble's write path may be unusable (it called Fatalf, or
	// panicked with its commit pipeline's mutex held), so the log never calls
	// it again, DB.Close included.
	wedged atomic.Bool

	// timeIndexed says queries may use the time index: false only for a
	// store opened read-only that an older build wrote. Set by Open.
	timeIndexed bool

	// release forgets the store in this process's table of open ones
	// (claimStore) once Pebble has let go of its directory.
	release func()

	durable atomic.Uint64 // every event with seq <= durable is synced
	waitMu  sync.Mutex
	waitCh  chan struct{} // closed and replaced whenever durable grows
}

// Open opens (creating if needed) the log stored in dir.
func Open(dir string, opts Options) (*Log, error) {
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.KeepSnapshots <= 0 {
		opts.KeepSnapshots = 3
	}
	if opts.OnFatal == nil {
		opts.OnFatal = defaultOnFatal(opts.Logger, dir)
	}
	if opts.memTableSize == 0 {
		// The log is write-once: a larger memtable means fewer flushes of
		// short-lived heartbeat records and fewer L0 files to compact.
		opts.memTableSize = 64 << 20
	}
	release, err := claimStore(opts.FS, dir)
	if err != nil {
		return nil, err
	}
	l := &Log{opts: opts, waitCh: make(chan struct{}), release: release}
	popts := &pebble.Options{
		FS:                 opts.FS,
		Logger:             pebbleLogger{l: opts.Logger, fatal: l.fatal},
		ReadOnly:           opts.ReadOnly,
		FormatMajorVersion: pebble.FormatNewest,
		MemTableSize:       opts.memTableSize,
		CacheSize:          opts.CacheSize,
	}
	db, err := openPebble(dir, popts)
	if err != nil {
		release()
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w by another process: %s (%v)", ErrLocked, dir, err)
		}
		return nil, fmt.Errorf("eventlog: open %s: %w", dir, err)
	}
	l.db = db
	if err := l.Err(); err != nil {
		// Pebble called Fatalf while opening and carried on: the store is not
		// to be trusted, nor closed (see wedged), and stays claimed.
		return nil, fmt.Errorf("eventlog: open %s: %w", dir, err)
	}
	if err := l.checkFormat(); err != nil {
		l.closeDB()
		return nil, err
	}
	last, err := l.lastEventSeq()
	if err != nil {
		l.closeDB()
		return nil, err
	}
	if l.mu.run, l.timeIndexed, err = l.openTimeIndex(last); err != nil {
		l.closeDB()
		return nil, err
	}
	l.mu.next = last + 1
	l.durable.Store(last)
	return l, nil
}

// openPebble is pebble.Open, with its panics turned into errors: Pebble
// panics when a sync of the store's directory fails (atomicfs.Marker.Move:
// "fsync errors are unrecoverable"), after cleaning up what it opened. A store
// that cannot be opened is an error to report, not a crash.
func openPebble(dir string, opts *pebble.Options) (db *pebble.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("pebble panicked: %v", r)
		}
	}()
	return pebble.Open(dir, opts)
}

func (l *Log) checkFormat() error {
	v, closer, err := l.db.Get(metaFormatKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		l.format.Store(storeFormat)
		if l.opts.ReadOnly {
			return nil // an empty store read offline
		}
		// A new store starts with a time index, empty and whole.
		b := l.db.NewBatch()
		defer b.Close()
		if err := errors.Join(b.Set(metaFormatKey, []byte{storeFormat}, nil), b.Set(metaTimeIndexKey, []byte{1}, nil),
			l.db.Apply(b, pebble.Sync)); err != nil {
			return fmt.Errorf("eventlog: write key %q: %w", metaFormatKey, err)
		}
		return l.Err() // a Fatalf during the write
	case err != nil:
		return fmt.Errorf("eventlog: read key %q: %w", metaFormatKey, err)
	}
	defer closer.Close()
	if len(v) != 1 {
		return fmt.Errorf("%w: key %q holds %d bytes, want 1", ErrCorrupt, metaFormatKey, len(v))
	}
	if v[0] > storeFormat {
		return fmt.Errorf("eventlog: store format %d (this build reads up to %d): %w", v[0], storeFormat, ErrNewerFormat)
	}
	l.format.Store(int32(v[0]))
	return nil
}

func (l *Log) lastEventSeq() (uint64, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{prefixEvent},
		UpperBound: []byte{prefixEvent + 1},
	})
	if err != nil {
		return 0, fmt.Errorf("eventlog: find last event: %w", err)
	}
	defer it.Close()
	if !it.Last() {
		return 0, it.Error()
	}
	return seqSuffix(it.Key())
}

// Commit is a batch of events that has entered the commit pipeline: its
// sequence numbers are final and it is ordered before every later batch, but
// it is not yet durable. Wait must be called exactly once.
type Commit struct {
	log         *Log
	batch       *pebble.Batch
	first, last uint64
}

// First and Last are the sequence numbers of the commit's first and last events.
func (c *Commit) First() uint64 { return c.first }

// Last is the sequence number of the commit's last event.
func (c *Commit) Last() uint64 { return c.last }

// Wait blocks until the commit is durable. An error means it may not be; the
// log is then failed and every later write returns ErrFailed. Once the log has
// failed, for whatever reason, Wait returns its error even for a commit whose
// own sync succeeded: after a failure nothing more is acknowledged.
func (c *Commit) Wait() error {
	defer c.log.inflight.Done()
	err := c.batch.SyncWait()
	if err != nil {
		c.batch.Close()
		return c.log.fail(fmt.Errorf("eventlog: sync seq %d..%d: %w", c.first, c.last, err), false)
	}
	if err := c.log.Err(); err != nil {
		c.batch.Close()
		return err
	}
	if c.log.opts.OnCommit != nil {
		c.log.opts.OnCommit(c.batch.CommitStats().TotalDuration)
	}
	c.batch.Close()
	c.log.markDurable(c.last)
	return nil
}

// Append appends evs and returns once they are durable. It assigns each event
// its sequence number (and, for TypeAcquired, its lease: the fencing token is
// the acquired event's own sequence number) in place.
func (l *Log) Append(evs []event.Event) error {
	c, err := l.Stage(evs, nil)
	if err != nil {
		return err
	}
	return c.Wait()
}

// Stage assigns sequence numbers to evs (in place), and hands them to Pebble's
// commit pipeline without waiting for the fsync. The events are ordered after
// every earlier Stage and before every later one. They are visible to Get
// immediately, but not to iterators until durable. The caller must call Wait
// on the result before replying to anyone about these events.
//
// Stage is how a caller that must decide under its own lock (lease.Service)
// keeps the decision order and the log order the same while letting fsyncs of
// concurrent decisions overlap.
//
// derive, if not nil, is called with the numbered events before they enter
// the pipeline; the archive records it returns are written in the same batch,
// so that a record derived from an event is durable exactly when the event
// is. An error from derive writes nothing, and is returned.
func (l *Log) Stage(evs []event.Event, derive func(evs []event.Event) ([]Record, error)) (*Commit, error) {
	if len(evs) == 0 {
		return nil, errors.New("eventlog: append of no events")
	}
	for i := range evs {
		if err := validate(&evs[i]); err != nil {
			return nil, err
		}
	}
	b := l.db.NewBatch()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		b.Close()
		return nil, ErrClosed
	}
	if err := l.Err(); err != nil {
		b.Close()
		return nil, err
	}
	first, run := l.mu.next, l.mu.run
	for i := range evs {
		e := &evs[i]
		e.Seq = first + uint64(i)
		if e.Type == event.TypeAcquired {
			e.Lease = e.Seq
		}
		if err := l.addLocked(b, e, &run); err != nil {
			b.Close()
			return nil, fmt.Errorf("eventlog: append seq %d: %w", e.Seq, err)
		}
	}
	what := fmt.Sprintf("seq %d..%d", first, first+uint64(len(evs))-1)
	if derive != nil {
		recs, err := derive(evs)
		if err == nil {
			err = l.addArchiveLocked(b, recs)
		}
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("eventlog: append %s: %w", what, err)
		}
	}
	if err := l.applyLocked(b, what); err != nil {
		return nil, err
	}
	l.mu.next, l.mu.run = first+uint64(len(evs)), run
	l.inflight.Add(1)
	return &Commit{log: l, batch: b, first: first, last: l.mu.next - 1}, nil
}

// applyLocked hands b to Pebble's commit pipeline without waiting for its
// sync. what names the batch in errors. On error the log has failed, and b is
// left to Pebble, which may still hold it. The caller holds mu, which keeps
// every write of the log out of the pipeline once it has failed: Pebble's
// pipeline does not survive some of its own failures (see wedged).
func (l *Log) applyLocked(b *pebble.Batch, what string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			// Pebble panics when its WAL writer has already failed (a failed
			// write or sync earlier, which this batch raced), and leaves the
			// commit pipeline's mutex locked: any later commit, and DB.Close,
			// would block forever.
			err = l.fail(fmt.Errorf("eventlog: apply %s: pebble panicked: %v", what, r), true)
		}
	}()
	if err := l.db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		return l.fail(fmt.Errorf("eventlog: apply %s: %w", what, err), false)
	}
	// When the pipeline breaks inside the apply (a WAL rotation that fails),
	// Pebble calls Fatalf and, if that returns, returns nil: the batch will
	// never be synced, and its waiter would block forever.
	return l.Err()
}

// addLocked writes e and its index entries into b, reusing l.mu.scratch. run
// is the run of the event before e, and becomes e's.
func (l *Log) addLocked(b *pebble.Batch, e *event.Event, run *runState) error {
	s := l.mu.scratch[:0]
	s = eventKey(s, e.Seq)
	k := len(s)
	s = event.AppendRecord(s, e)
	if err := b.Set(s[:k], s[k:], nil); err != nil {
		return err
	}
	s = typeIndexKey(s[:0], e.Type, e.Seq)
	if err := b.Set(s, nil, nil); err != nil {
		return err
	}
	if e.Job != "" {
		s = stringIndexKey(s[:0], prefixJob, e.Job, e.Seq)
		if err := b.Set(s, nil, nil); err != nil {
			return err
		}
	}
	if e.Worker != "" {
		s = stringIndexKey(s[:0], prefixWorker, e.Worker, e.Seq)
		if err := b.Set(s, nil, nil); err != nil {
			return err
		}
	}
	if run.starts(e.Time) {
		var err error
		if s, err = addRun(b, s, run.sec, e.Seq); err != nil {
			return err
		}
	}
	l.mu.scratch = s
	return nil
}

// validate refuses what would corrupt the keyspace or could never be read back.
func validate(e *event.Event) error {
	if !e.Type.Known() {
		return fmt.Errorf("eventlog: append: unknown event type %d", e.Type)
	}
	for _, id := range [...]struct{ what, v string }{{"job", e.Job}, {"worker", e.Worker}} {
		if len(id.v) > MaxIDLen {
			return fmt.Errorf("eventlog: append %s: %s id of %d bytes exceeds %d", e.Type, id.what, len(id.v), MaxIDLen)
		}
		if strings.IndexByte(id.v, sep) >= 0 {
			return fmt.Errorf("eventlog: append %s: %s id %q holds a NUL byte", e.Type, id.what, id.v)
		}
	}
	return nil
}

// fail fails the log with err, unless it failed already, and returns the
// error that failed it. wedged says Pebble's write path may be unusable. Every
// WaitDurable is woken, to return the failure rather than wait for a sync
// that will not come.
func (l *Log) fail(err error, wedged bool) error {
	err = fmt.Errorf("%w: %v", ErrFailed, err)
	first := l.failure.CompareAndSwap(nil, &err)
	if wedged { // after the failure: whoever sees wedged sees a failure
		l.wedged.Store(true)
	}
	if first {
		l.wakeWaiters()
	}
	return l.Err()
}

// fatal is Pebble's Fatalf: the log fails, then OnFatal is told.
func (l *Log) fatal(msg string) {
	l.fail(fmt.Errorf("pebble: %s", msg), true)
	l.opts.OnFatal(msg)
}

// Err returns the error that failed the log, or nil while it is healthy.
func (l *Log) Err() error {
	if p := l.failure.Load(); p != nil {
		return *p
	}
	return nil
}

func (l *Log) markDurable(seq uint64) {
	for {
		cur := l.durable.Load()
		if seq <= cur {
			return
		}
		if l.durable.CompareAndSwap(cur, seq) {
			break
		}
	}
	l.wakeWaiters()
}

func (l *Log) wakeWaiters() {
	l.waitMu.Lock()
	close(l.waitCh)
	l.waitCh = make(chan struct{})
	l.waitMu.Unlock()
}

// LastSeq is the sequence number of the last event staged, durable or not.
func (l *Log) LastSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.next - 1
}

// DurableSeq is the highest sequence number known durable: every event up to
// it survives a crash.
func (l *Log) DurableSeq() uint64 { return l.durable.Load() }

// WaitDurable blocks until every event up to seq is durable, the log fails, or
// ctx ends. Readers use it so that nothing they answer can be undone by a
// crash. When ctx ends first, the error wraps ctx.Err().
func (l *Log) WaitDurable(ctx context.Context, seq uint64) error {
	for {
		if l.durable.Load() >= seq {
			return nil
		}
		l.waitMu.Lock()
		ch := l.waitCh
		l.waitMu.Unlock()
		if l.durable.Load() >= seq {
			return nil
		}
		if err := l.Err(); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("eventlog: wait for seq %d to be durable: %w", seq, ctx.Err())
		}
	}
}

// Close waits for staged commits to be waited on, then closes the store. On a
// failed log it returns the failure; if Pebble's write path may be unusable
// (after its Fatalf, or a panic), the store is not closed but left as a crash
// would leave it, lock included: the process is expected to exit, and the
// next open recovers the durable prefix.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.mu.closed = true
	l.mu.Unlock()
	l.inflight.Wait()
	wedged := l.wedged.Load()
	failure := l.Err()
	if wedged {
		return fmt.Errorf("eventlog: close: store left open after a fatal storage error: %w", failure)
	}
	err := l.db.Close()
	l.release()
	if err != nil {
		return errors.Join(failure, fmt.Errorf("eventlog: close: %w", err))
	}
	return failure
}

// closeDB closes the store while Open fails, unless Pebble's write path may
// be unusable.
func (l *Log) closeDB() {
	if !l.wedged.Load() {
		_ = l.db.Close()
		l.release()
	}
}

// Get returns the event with sequence number seq, copied.
func (l *Log) Get(seq uint64) (event.Event, error) {
	v, closer, err := l.db.Get(eventKey(nil, seq))
	if errors.Is(err, pebble.ErrNotFound) {
		return event.Event{}, fmt.Errorf("eventlog: seq %d: %w", seq, ErrNotFound)
	}
	if err != nil {
		return event.Event{}, fmt.Errorf("eventlog: get seq %d: %w", seq, err)
	}
	defer closer.Close()
	return event.Decode(seq, v)
}

// ErrNotFound is returned by Get for a sequence number the log does not hold.
var ErrNotFound = errors.New("eventlog: not found")

// Exists reports whether dir holds a store (on fs; nil means the OS
// filesystem). A missing dir holds none.
func Exists(dir string, fs vfs.FS) (bool, error) {
	if fs == nil {
		fs = vfs.Default
	}
	if _, err := fs.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	desc, err := pebble.Peek(dir, fs)
	if err != nil {
		return false, fmt.Errorf("eventlog: look for a store in %s: %w", dir, err)
	}
	return desc.Exists, nil
}
