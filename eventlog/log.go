// Package eventlog is leaselog's only source of truth: an append-only log of
// lease events kept in Pebble. It stores the records of package event (whose
// codec it calls, never redefines) and owns the keyspace, the secondary and
// time indexes, snapshots, the archive, iteration and queries, and the
// ordered group commit that makes appends durable. No other package opens
// Pebble: the rest of the program sees the log through this package, and
// names Pebble's vfs only to choose the filesystem a store lives on
// ([Options.FS]).
//
// # Files and keys
//
// open.go opens and closes a store (lock.go refuses a second Log on
// one store in this process; logger.go routes Pebble's messages and its
// Fatalf); append.go numbers, stages and group-commits events and waits for
// their durability; iter.go reads them (Get, Iter, Query; readahead.go for
// long scans); compact.go folds the heartbeats of jobs that ended into
// summaries, gaps.go keeps the runs of seqs that removes; timeindex.go,
// snapshot.go, archive.go and alive.go keep what their names say;
// checkpoint.go copies the running store (a backup) and takes the log as it
// is, for a replica's engine; keys.go lays out the keyspace:
//
//	'm' "format"                       -> format(1)              (meta: store format)
//	'm' "timeindex"                    -> 1                      (the time index is whole)
//	'e' seq(8)                         -> record                 (the log; event.AppendRecord)
//	't' type(1) seq(8)                 -> empty                  (index by type)
//	'j' job 0x00 seq(8)                -> empty                  (index by job)
//	'w' worker 0x00 seq(8)             -> empty                  (index by worker)
//	's' seq(8)                         -> crc32c(4) snapshot     (projection snapshots)
//	'a' key                            -> value                  (the archive, see Record)
//	'c' second(8) seq(8)               -> empty                  (time index: runs by second)
//	'r' seq(8)                         -> second(8)              (time index: runs by seq)
//	'g' first(8)                       -> last(8)                (seqs a compaction removed)
//	'G' last(8)                        -> first(8)               (the same, by their last)
//	'm' "compacted"                    -> seq(8)                 (the compaction's cursor)
//
// Integers are big-endian, so that keys sort by number (a second has its sign
// bit flipped, so that times before 1970 sort first). Beside Pebble's files,
// the file alive holds the daemon's last-alive mark (alive.go): not a key,
// for Pebble keeps an unsynced write in the process until its next sync.
//
// The time index names the first event of each run of events that fall in
// the same second, so that a query for a time window reads only the runs in
// it.
//
// # Order and durability
//
// An event and its index entries are written in one batch, so an index never
// names an event that is not there, and an event is never missing from the
// indexes that should name it. Sequence numbers start at 1 and are assigned
// without gaps under one mutex in the order batches enter Pebble's commit
// pipeline, so the order of sequence numbers is the commit order and a crash
// can only lose a suffix of the log, never a hole in it. The only gaps are a
// compaction's, which it records (compact.go): a scan of the log refuses
// any other as corruption.
//
// [Log.Append] returns once the events are durable (fsynced); [Log.Stage]
// and [Commit.Wait] split it for a caller that decides under its own lock.
// Concurrent appenders share fsyncs: each batch enters the commit pipeline
// without waiting for its sync (DB.ApplyNoSyncWait), and Pebble's WAL writer
// syncs everything queued at once; a sync that covers a batch covers every
// batch before it. Readers see only durable events (iterators), or wait for
// them ([Log.WaitDurable]), so that nothing they answer can be undone by a crash.
//
// # Failure
//
// One [Log] per store: a second [Open], from another process or from this
// one, returns [ErrLocked]. Open refuses a store a newer build wrote (its format,
// or its last record's version, past this build's) before anything is
// written to it (open.go).
//
// The log is fail-stop. The first write that cannot be made durable (a failed
// WAL write or sync, a snapshot's or an archive write's included), a panic out
// of Pebble's commit pipeline, or Pebble's Logger.Fatalf fails it for good:
// every later write, and every Wait still pending, returns [ErrFailed], readers
// waiting for durability are woken with it, and nothing more is acknowledged.
// Only a new Open, in practice a new process, recovers the durable prefix.
package eventlog

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
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
	// Replica, if set, is where appends are made durable first: this store
	// is then its cache (see replica.go). nil for the embedded default.
	Replica Replica

	// SegmentHeartbeats is the most heartbeats one lease.heartbeats summary
	// stands for (CompactJob); 0 means DefaultSegmentHeartbeats.
	SegmentHeartbeats int

	// memTableSize overrides Pebble's memtable size, so that tests in this
	// package can make Pebble rotate its WAL; 0 means the default.
	memTableSize uint64
}

// Log is an open event log. All methods are safe for concurrent use.
type Log struct {
	db   *pebble.DB
	opts Options
	dir  string

	// alive is the alive mark's file (alive.go), opened by the first PutAlive.
	alive struct {
		sync.Mutex
		f      vfs.File
		buf    [aliveLen]byte
		closed bool
	}

	mu struct {
		sync.Mutex
		next    uint64 // sequence number of the next event
		scratch []byte // encoding buffer, reused under mu
		closed  bool

		run runState // the run of the last event, for the time index
	}
	format   atomic.Int32 // the store's format as opened, then as upgraded
	inflight sync.WaitGroup

	// compactMu keeps compactions one at a time (compact.go).
	compactMu sync.Mutex
	// snaps lists the seqs of the snapshots the store holds (snapshot.go).
	snaps snapList
	// compacted, if set (by tests), is called after each batch a
	// compaction wrote: a crash point.
	compacted func()

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

// fail fails the log with err, unless it failed already, and returns the
// error that failed it. wedged says Pebble's write path may be unusable. Every
// WaitDurable is woken, to return the failure rather than wait for a sync
// that will not come.
func (l *Log) fail(err error, wedged bool) error {
	err = fmt.Errorf("%w: %w", ErrFailed, err) // the cause stays matchable (a deposed replica)
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
