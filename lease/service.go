// Package lease is the lease service: commands in, events out. It is the only
// writer of events. Every command takes one path (command.go): it is decided
// under one mutex against the lease table (and the archive of ended jobs), its
// events are staged into the log in decision order and folded into the table
// (the fold checks each against the transition table of package fsm), and the
// reply waits, outside the mutex, until the events are durable. Concurrent
// commands so share fsyncs without ever answering about an event a crash could
// undo. A failure of the log fails the service, wherever a command or a read
// meets it: from then on every command is refused with ErrFailed (the log's
// error in its chain) until the daemon restarts, and no error of the log
// reaches a caller as the log's own. Reads take the same path and wait until
// what they read is durable; the service answers every read its API needs
// (jobs, leases, events, counts), so that no caller reaches into its log or
// its table.
//
// The service also owns time: the sweeper that turns silence into
// worker.unreachable and lease.expired, and the detection of the daemon's own
// absence (daemon.started at Open, the time since the daemon was last alive,
// which the sweeper's alive mark tells; daemon.resumed, checked by every
// command that records an event and by every sweep, before it touches a
// deadline) that keeps a sleep or a stop from ever counting against a worker,
// and only those. Time comes from a Clock: by default the daemon's own (the
// wall clock at Open, then CLOCK_BOOTTIME's count, so that a wall-clock step
// never expires anything), injected by tests and the simulation. The
// decisions are recorded as events, so replay never reads a clock.
package lease

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/replay"
	"github.com/leaselog/leaselog/timing"
)

// Errors callers branch on. Each is returned wrapped, with a message saying
// what was wrong.
var (
	ErrInvalid     = errors.New("invalid request")                                                              // bad input: HTTP 400
	ErrNotFound    = errors.New("not found")                                                                    // unknown job or lease: 404
	ErrWrongWorker = errors.New("lease held by another worker")                                                 // 403
	ErrStaleLease  = errors.New("stale lease")                                                                  // old or expired token: 409
	ErrJobExists   = errors.New("job exists with another kind, spec, max_requeues, labels, priority or timing") // 409
	ErrStopping    = errors.New("daemon is stopping")                                                           // 503
	ErrFailed      = errors.New("lease service failed; restart the daemon")                                     // storage failed: 503
)

// Options configures a Service.
type Options struct {
	timing.Config
	// Clock is the time the service decides by and stamps events with. nil
	// means the daemon's clock of docs/design.md §4: Wall read once at Open, then
	// Boot's count since, so that within one life a wall-clock step moves
	// nothing and a suspend of the host counts as the daemon's absence.
	// Tests and the simulation inject a Clock, or set Wall and Boot.
	Clock Clock
	// Wall and Boot feed the default clock; nil means the host's wall clock
	// and CLOCK_BOOTTIME. Mono, with Boot, tells how long the host slept
	// (every sleep is the daemon's absence); nil means CLOCK_MONOTONIC when
	// Boot is nil too, and no sleep seen but as a gap otherwise.
	Wall, Boot, Mono Clock
	// Entropy feeds event ULIDs; nil means crypto/rand. Tests pass a seeded source.
	Entropy io.Reader
	Logger  zerolog.Logger
	// SnapshotEvery is how many events pass between snapshots the sweeper
	// writes; 0 (or negative) means never by count, as in the daemon's
	// config (store.snapshot_every), whose default is DefaultSnapshotEvery.
	SnapshotEvery int
	// SnapshotPerItem, when positive, holds the count back for a large
	// table: a snapshot by count is due once the events since the last one
	// reach SnapshotPerItem times the table's size (its jobs and leases,
	// projection.Table.Size), if that is more than SnapshotEvery. A
	// snapshot's cost (its encoding under the mutex, its write, the
	// memory Pebble holds while it flushes) grows with the table, and a
	// restart's replay with the events after it: so each snapshot is paid
	// for by work in proportion, and heartbeats, one event a lease a
	// renewal, do not write a table of 500,000 leases every few seconds.
	// 0 means SnapshotEvery alone, as in the tests; the daemon's is
	// DefaultSnapshotPerItem. SnapshotInterval is not held back.
	SnapshotPerItem int
	// SnapshotInterval is how much time (on Clock) may pass between snapshots
	// while events are appended; 0 means never by time.
	SnapshotInterval time.Duration
	// MaxRequeues is the cap on requeues after losses of an evaluation
	// submitted without one (SubmitItem.MaxRequeues): 0, the default, is no
	// cap, as on the Leases page; the cap is recorded with each job, so that
	// a later change applies to later jobs only.
	MaxRequeues int
	// StartReason is the reason of the daemon.started Open records: empty
	// for a start, "takeover" for a standby that takes over from the active
	// daemon (package jetstream). Its gap is counted against nobody either way.
	StartReason string
	// Bounds limit the timing a job may ask for of its own
	// (SubmitItem.Timing); zero fields set no limit. The daemon's are
	// timing.DefaultBounds unless configured.
	Bounds timing.Bounds
	// HeartbeatRetention is how long (on Clock) after its job ended a
	// lease's heartbeats are kept before the compactor (Compact,
	// RunCompaction) folds them into summaries; 0 keeps them all, as the
	// tests' default. The daemon's default is DefaultHeartbeatRetention.
	HeartbeatRetention time.Duration
}

// DefaultHeartbeatRetention is the daemon's HeartbeatRetention: a day.
const DefaultHeartbeatRetention = 24 * time.Hour

// DefaultSnapshotEvery is the daemon's default SnapshotEvery, so that a
// restart replays no more than about this many events after its snapshot.
const DefaultSnapshotEvery = 100_000

// DefaultSnapshotPerItem is the daemon's SnapshotPerItem: a restart
// replays no more than about four events an item its snapshot restored, or
// SnapshotEvery if that is more, and fewer when SnapshotInterval wrote one
// sooner (why four: docs/performance.md, "Snapshot cadence").
const DefaultSnapshotPerItem = 4

// Service is the lease service. Its methods are safe for concurrent use.
type Service struct {
	log    *eventlog.Log
	cfg    timing.Config
	clock  Clock
	logger zerolog.Logger
	every  int
	// perItem is Options.SnapshotPerItem.
	perItem int
	period  time.Duration
	built   replay.Stats
	// maxRequeues is Options.MaxRequeues: the cap of an evaluation
	// submitted without one.
	maxRequeues int
	// bounds is Options.Bounds: the limits of a job's own timing.
	bounds timing.Bounds
	// retention is Options.HeartbeatRetention; compaction is what the
	// compactor did (compact.go).
	retention  time.Duration
	compaction compaction
	// failed is set with mu.err: Err reads it without the mutex, which every
	// API call would otherwise take once more.
	failed atomic.Bool
	// aliveFailing: the last alive mark the sweeper wrote failed (logged once).
	aliveFailing atomic.Bool

	mu struct {
		sync.Mutex
		table    *projection.Table
		entropy  *ulid.MonotonicEntropy
		lastSeen int64         // when (Clock, ns) the daemon last swept or committed: the gap to it is absence past grace
		slept    time.Duration // the host's sleep (sleeper) already recorded as absence, or seen while present
		sleptNow time.Duration // the reading awakeLocked took; recorded once its commit is staged
		lastSnap uint64        // seq of the last snapshot written
		snapLen  int           // its length in bytes (0: none written since the service opened)
		snapAt   int64         // when (Clock, ns) it was written, or the service opened
		err      error         // sticky: the service failed
		stopping bool
		queued   chan struct{}         // closed (and replaced) when a job is queued or comes due
		offers   map[string]*offerSeen // each worker's last offer (schedule.go)
	}
}

// Open rebuilds the lease table from log (newest snapshot plus tail) and
// records the start: daemon.started, with the downtime as its gap, so that
// the downtime never counts against a worker. The downtime is the time since
// the daemon was last alive: its last event or its alive mark (the sweeper's,
// see markAlive), whichever is later — not the time since its last event,
// which would count the time it ran and recorded nothing as its absence too,
// so that a daemon restarted more often than toleration would never expire
// a silent worker's lease.
func Open(log *eventlog.Log, opts Options) (*Service, error) {
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if opts.MaxRequeues < 0 || opts.MaxRequeues > MaxRequeuesLimit {
		return nil, fmt.Errorf("lease: Options.MaxRequeues %d: want 0 (no cap) to %d", opts.MaxRequeues, MaxRequeuesLimit)
	}
	if opts.Entropy == nil {
		opts.Entropy = rand.Reader
	}
	table, st, err := replay.Rebuild(log, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("lease: open: %w", err)
	}
	alive := lastAlive(log, table, opts.Logger)
	if opts.Clock == nil {
		if opts.Wall == nil {
			opts.Wall = SystemClock()
		}
		if opts.Boot == nil {
			opts.Boot = BoottimeClock()
			if opts.Mono == nil {
				opts.Mono = MonotonicClock()
			}
		}
		opts.Clock = newLifeClock(opts.Wall, opts.Boot, opts.Mono, alive)
	}
	s := &Service{log: log, cfg: opts.Config, clock: opts.Clock, logger: opts.Logger,
		every: opts.SnapshotEvery, perItem: opts.SnapshotPerItem, period: opts.SnapshotInterval, built: st, maxRequeues: opts.MaxRequeues, bounds: opts.Bounds,
		retention: opts.HeartbeatRetention}
	table.SetRetire(projection.RetireRecord) // ended jobs go to the archive with their events
	s.mu.table = table
	s.mu.entropy = ulid.Monotonic(opts.Entropy, 0)
	s.mu.lastSnap = st.SnapshotSeq
	s.mu.queued = make(chan struct{})
	s.logger.Info().Uint64("seq", table.Seq()).Uint64("snapshot", st.SnapshotSeq).Int("replayed", st.Events).
		Msg("lease table rebuilt")

	_, err = command(context.Background(), s, "open", func(t *tx) (struct{}, error) {
		now := t.clock()
		var gap int64
		if table.Seq() > 0 {
			gap = max(0, now-alive)
		}
		s.mu.lastSeen, s.mu.snapAt = now, now
		_, err := t.stage(event.Event{Type: event.TypeDaemonStarted, Gap: gap, Reason: opts.StartReason})
		return struct{}{}, err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// lastAlive is the last moment the daemon knew itself alive before this
// start: its last event, or its alive mark when that is later (it ran on,
// sweeping, after it). A mark that cannot be read is logged and left out:
// the downtime then counts from the last event, longer than it was, which
// delays expiries and never causes one.
func lastAlive(log *eventlog.Log, table *projection.Table, logger zerolog.Logger) int64 {
	last := table.LastTime()
	at, ok, err := log.Alive()
	switch {
	case err != nil:
		logger.Warn().Err(err).Msg("alive mark unreadable: the downtime counts from the last event")
	case ok:
		last = max(last, at)
	}
	return last
}

// Rebuilt says how Open rebuilt the table: from which snapshot, replaying
// how many events.
func (s *Service) Rebuilt() replay.Stats { return s.built }

// Config returns the timing the service runs with.
func (s *Service) Config() timing.Config { return s.cfg }

// Err returns the error that failed the service, or nil.
func (s *Service) Err() error {
	if !s.failed.Load() && s.log.Err() == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failedLocked("")
}

// eventLevel is the level of each event's log line. The events of a job's
// ordinary course (queued, acquired, running, each heartbeat) are logged at
// debug: at the default level a daemon writes no line per call. What ends a
// job or a lease (reported, with its outcome; expired; cancelled; revoked;
// lost), a stale report refused, a worker's reachability and the daemon's
// own events are state changes, logged at info: one line per job that ends.
var eventLevel = func() (l [event.NumTypes]zerolog.Level) {
	for t := range l {
		l[t] = zerolog.InfoLevel
	}
	for _, t := range []event.Type{event.TypeQueued, event.TypeAcquired, event.TypeRunning, event.TypeHeartbeat} {
		l[t] = zerolog.DebugLevel
	}
	return l
}()

func (s *Service) logEvent(e *event.Event) {
	lvl := zerolog.InfoLevel
	if int(e.Type) < len(eventLevel) {
		lvl = eventLevel[e.Type]
	}
	ev := s.logger.WithLevel(lvl)
	if !ev.Enabled() {
		return
	}
	ev = ev.Uint64("seq", e.Seq).Str("type", e.Type.String())
	if e.Job != "" {
		ev = ev.Str("job", e.Job)
	}
	if e.Lease != 0 {
		ev = ev.Uint64("lease", e.Lease)
	}
	if e.Worker != "" {
		ev = ev.Str("worker", e.Worker)
	}
	if e.Outcome != 0 {
		ev = ev.Stringer("outcome", e.Outcome)
	}
	if e.Mode != 0 {
		ev = ev.Stringer("mode", e.Mode)
	}
	if e.Reason != "" {
		ev = ev.Str("reason", e.Reason)
	}
	if e.Gap != 0 {
		ev = ev.Float64("gap_seconds", time.Duration(e.Gap).Seconds())
	}
	ev.Msg("event")
}

// read runs fn on the table under the lock, then waits until everything fn
// could have seen is durable, so that no answer a reader gets can be undone by
// a crash.
func (s *Service) read(ctx context.Context, fn func(t *projection.Table)) error {
	_, err := command(ctx, s, "read", func(*tx) (struct{}, error) {
		fn(s.mu.table)
		return struct{}{}, nil
	})
	return err
}

// View runs fn on the lease table, under the service's lock, then waits until
// what fn could have seen is durable; fn must not keep the table or block.
// It is for checkers that compare the whole table (tests, the simulation, the
// scenario runner, the crash check): the daemon's answers use the service's
// own reads.
func (s *Service) View(ctx context.Context, fn func(t *projection.Table)) error {
	return s.read(ctx, fn)
}

// Close writes a last snapshot (when the service is healthy). It does not
// close the log, which the caller opened.
func (s *Service) Close() error {
	if s.Err() != nil {
		return nil
	}
	return s.snapshot(true)
}

// snapshot writes a snapshot of the table if events were appended since the
// last one and either enough of them (snapshotDueLocked) or enough time
// (SnapshotInterval) passed, or if force is set.
func (s *Service) snapshot(force bool) error {
	s.mu.Lock()
	seq, now := s.mu.table.Seq(), s.now()
	due := seq > s.mu.lastSnap && s.mu.err == nil && (force ||
		s.snapshotDueLocked(seq-s.mu.lastSnap) ||
		(s.period > 0 && now-s.mu.snapAt >= int64(s.period)))
	var data []byte
	if due {
		// Made with room for the last one and a quarter more: a table
		// grows between snapshots, and a snapshot grown by append from
		// nothing allocates several times its size.
		data = s.mu.table.AppendSnapshot(make([]byte, 0, s.mu.snapLen+s.mu.snapLen/4))
		s.mu.lastSnap, s.mu.snapAt, s.mu.snapLen = seq, now, len(data)
	}
	s.mu.Unlock()
	if !due {
		return nil
	}
	if err := s.waitDurable(context.Background(), seq); err != nil {
		return err
	}
	// Not used past the put, which copies it: free while the copy is synced.
	n := len(data)
	if err := s.log.PutSnapshot(seq, data); err != nil {
		return s.logErr(fmt.Errorf("lease: snapshot at seq %d: %w", seq, err), "snapshot")
	}
	s.logger.Info().Uint64("seq", seq).Int("bytes", n).Msg("snapshot written")
	return nil
}

// snapshotDueLocked says whether n events since the last snapshot are enough
// for the next: SnapshotEvery of them, or SnapshotPerItem an item of the
// table if that is more.
func (s *Service) snapshotDueLocked(n uint64) bool {
	if s.every <= 0 {
		return false
	}
	need := uint64(s.every)
	if s.perItem > 0 {
		need = max(need, uint64(s.perItem)*uint64(s.mu.table.Size()))
	}
	return n >= need
}
