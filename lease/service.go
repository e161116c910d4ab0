// Package lease is the lease service: commands in, events out. It is the only
// writer of the event log. Each command is decided under one mutex against the
// lease table (with the transition table of package fsm), its events are
// staged into the log in decision order, folded into the table, and the reply
// waits, outside the mutex, until the events are durable. Concurrent commands
// so share fsyncs without ever answering about an event a crash could undo.
//
// The service also owns time: the sweeper that turns silence into
// worker.unreachable and lease.expired, and the detection of the daemon's own
// absence (daemon.started at Open; daemon.resumed, checked by every command
// and every sweep before it touches a deadline) that keeps a sleep or a stop
// from ever counting against a worker. Time comes from a Clock: by default
// the daemon's own (the wall clock at Open, then CLOCK_BOOTTIME's count, so
// that a wall-clock step never expires anything), injected by tests and the
// simulation. The decisions are recorded as events, so replay never reads a
// clock.
package lease

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/replay"
)

// Errors callers branch on. Each is returned wrapped, with a message saying
// what was wrong.
var (
	ErrInvalid     = errors.New("invalid request")                          // bad input: HTTP 400
	ErrNotFound    = errors.New("not found")                                // unknown job or lease: 404
	ErrWrongWorker = errors.New("lease held by another worker")             // 403
	ErrStaleLease  = errors.New("stale lease")                              // old or expired token: 409
	ErrJobExists   = errors.New("job exists with another kind or spec")     // 409
	ErrStopping    = errors.New("daemon is stopping")                       // 503
	ErrFailed      = errors.New("lease service failed; restart the daemon") // storage failed: 503
)

// Options configures a Service.
type Options struct {
	Config
	// Clock is the time the service decides by and stamps events with. nil
	// means the daemon's clock of DESIGN §4: Wall read once at Open, then
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
	// writes; 0 means 100,000, negative means never.
	SnapshotEvery int
	// SnapshotInterval is how much time (on Clock) may pass between snapshots
	// while events are appended; 0 means never by time.
	SnapshotInterval time.Duration
}

// Service is the lease service. Its methods are safe for concurrent use.
type Service struct {
	log    *eventlog.Log
	cfg    Config
	clock  Clock
	logger zerolog.Logger
	every  int
	period time.Duration
	built  replay.Stats

	mu struct {
		sync.Mutex
		table    *projection.Table
		entropy  *ulid.MonotonicEntropy
		lastSeen int64         // when (Clock, ns) the daemon last swept or committed: the gap to it is absence past grace
		slept    time.Duration // the host's sleep (sleeper) already recorded as absence, or seen while present
		sleptNow time.Duration // the reading awakeLocked took; recorded once its commit is staged
		lastSnap uint64        // seq of the last snapshot written
		snapAt   int64         // when (Clock, ns) it was written, or the service opened
		err      error         // sticky: the service failed
		stopping bool
		queued   chan struct{} // closed (and replaced) when a job is queued
	}
}

// Open rebuilds the lease table from log (newest snapshot plus tail) and
// records the start: daemon.started, with the downtime since the last event
// as its gap, so that the downtime never counts against a worker.
func Open(log *eventlog.Log, opts Options) (*Service, error) {
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if opts.Entropy == nil {
		opts.Entropy = rand.Reader
	}
	if opts.SnapshotEvery == 0 {
		opts.SnapshotEvery = 100_000
	}
	table, st, err := replay.Rebuild(log, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("lease: open: %w", err)
	}
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
		opts.Clock = newLifeClock(opts.Wall, opts.Boot, opts.Mono, table.LastTime())
	}
	s := &Service{log: log, cfg: opts.Config, clock: opts.Clock, logger: opts.Logger,
		every: opts.SnapshotEvery, period: opts.SnapshotInterval, built: st}
	table.SetRetire(projection.RetireRecord) // ended jobs go to the archive with their events
	s.mu.table = table
	s.mu.entropy = ulid.Monotonic(opts.Entropy, 0)
	s.mu.lastSnap = st.SnapshotSeq
	s.mu.queued = make(chan struct{})
	s.logger.Info().Uint64("seq", table.Seq()).Uint64("snapshot", st.SnapshotSeq).Int("replayed", st.Events).
		Msg("lease table rebuilt")

	s.mu.Lock()
	now := s.clock.Now().UnixNano()
	var gap int64
	if table.Seq() > 0 {
		gap = max(0, now-table.LastTime())
	}
	s.mu.lastSeen, s.mu.snapAt = now, now
	_, c, err := s.commitLocked(now, []event.Event{{Type: event.TypeDaemonStarted, Gap: gap}})
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := s.wait(c); err != nil {
		return nil, err
	}
	return s, nil
}

// Rebuilt says how Open rebuilt the table: from which snapshot, replaying
// how many events.
func (s *Service) Rebuilt() replay.Stats { return s.built }

// Config returns the timing the service runs with.
func (s *Service) Config() Config { return s.cfg }

// Log returns the event log the service writes, for readers of history.
func (s *Service) Log() *eventlog.Log { return s.log }

// awakeLocked is the rule every command and every sweep follows before it
// touches a deadline (DESIGN §4): if the daemon's last sweep or commit is
// more than grace ago on its clock, the daemon itself was absent — asleep,
// stopped, starved — and the whole gap is recorded first, as daemon.resumed,
// which takes it out of every deadline. A sleep of the host shorter than that
// is the daemon's absence too (its clock knows how long the host slept: see
// sleeper), and is recorded as daemon.resumed with the sleep as its gap;
// erring this way only delays expiries. It returns that event, or nil when
// the daemon was present (and then counts it as seen now: moving lastSeen on
// hides no gap, since none was pending). commitLocked applies it to every
// command's events; Sweep, which judges deadlines, calls it through
// commitLocked before it judges.
func (s *Service) awakeLocked(now int64) []event.Event {
	if sl, ok := s.clock.(sleeper); ok {
		s.mu.sleptNow = sl.Slept()
	}
	gap := now - s.mu.lastSeen
	if slept := s.mu.sleptNow - s.mu.slept; gap <= int64(s.cfg.Grace) && slept >= minSleep {
		gap = min(gap, int64(slept))
	} else if gap <= int64(s.cfg.Grace) {
		s.mu.lastSeen, s.mu.slept = max(s.mu.lastSeen, now), s.mu.sleptNow
		return nil
	}
	return []event.Event{{Type: event.TypeDaemonResumed, Gap: gap}}
}

// minSleep is the shortest sleep of the host taken as absence: shorter than
// any suspend, longer than the two clocks' readings can differ by.
const minSleep = time.Millisecond

// commitLocked stamps evs (time, ULID), stages them into the log and folds
// them into the table, after the daemon.resumed that awakeLocked asks for, if
// any. It returns the events as staged (numbered; a resume first), and nil
// with no commit when there is nothing to stage. The caller must Wait on the
// commit, outside the lock, before telling anyone about the events.
func (s *Service) commitLocked(now int64, evs []event.Event) ([]event.Event, *eventlog.Commit, error) {
	if s.mu.err != nil {
		return nil, nil, s.mu.err
	}
	if resume := s.awakeLocked(now); resume != nil {
		evs = append(resume, evs...)
	}
	if len(evs) == 0 {
		return nil, nil, nil
	}
	for i := range evs {
		id, err := ulid.New(ulid.Timestamp(time.Unix(0, now)), s.mu.entropy)
		if err != nil {
			return nil, nil, fmt.Errorf("lease: mint event id: %w", err)
		}
		evs[i].ID, evs[i].Time = id, now
	}
	// The events are folded once numbered, before they enter the pipeline,
	// so that the archive records of the jobs they end go in the same batch.
	folded := false
	c, err := s.log.Stage(evs, func(evs []event.Event) ([]eventlog.Record, error) {
		folded = true
		for i := range evs {
			if err := s.mu.table.Apply(&evs[i]); err != nil {
				return nil, fmt.Errorf("fold of own event: %w", err)
			}
		}
		return s.mu.table.TakeRetired(), nil
	})
	if err != nil {
		// Once folded, the table is ahead of the log (an event the fold
		// refused is a bug in the decision above; nothing was written): stop
		// before the two drift apart any further.
		if folded || errors.Is(err, eventlog.ErrFailed) || errors.Is(err, eventlog.ErrClosed) {
			s.failLocked(err)
			return nil, nil, s.mu.err
		}
		return nil, nil, err
	}
	s.mu.lastSeen, s.mu.slept = max(s.mu.lastSeen, now), s.mu.sleptNow
	queued := false
	for i := range evs {
		queued = queued || evs[i].Type == event.TypeQueued
		s.logEvent(&evs[i])
	}
	if queued {
		close(s.mu.queued)
		s.mu.queued = make(chan struct{})
	}
	return evs, c, nil
}

// lock takes the service's mutex for a command, unless the service failed:
// then every command is refused, those that would record nothing included.
func (s *Service) lock() error {
	s.mu.Lock()
	if err := s.failedLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	return nil
}

// failedLocked returns the error that failed the service. The log may have
// failed under something other than one of its commands (a snapshot's sync,
// Pebble's Fatalf in a background flush): the service fails with it the
// first time it looks.
func (s *Service) failedLocked() error {
	if s.mu.err == nil {
		if err := s.log.Err(); err != nil {
			s.failLocked(err)
		}
	}
	return s.mu.err
}

// wait waits for c to be durable; a failure fails the service.
func (s *Service) wait(c *eventlog.Commit) error {
	if err := c.Wait(); err != nil {
		s.mu.Lock()
		s.failLocked(err)
		err = s.mu.err
		s.mu.Unlock()
		return err
	}
	return nil
}

func (s *Service) failLocked(err error) {
	if s.mu.err == nil {
		s.mu.err = fmt.Errorf("%w: %v", ErrFailed, err)
		s.logger.Error().Err(err).Msg("lease service failed: refusing every command until restarted")
	}
}

// Err returns the error that failed the service, or nil.
func (s *Service) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failedLocked()
}

func (s *Service) logEvent(e *event.Event) {
	lvl := zerolog.InfoLevel
	if e.Type == event.TypeHeartbeat {
		lvl = zerolog.DebugLevel
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
		ev = ev.Dur("gap", time.Duration(e.Gap))
	}
	ev.Msg("event")
}

// read runs fn on the table under the lock, then waits until everything fn
// could have seen is durable, so that no answer a reader gets can be undone by
// a crash.
func (s *Service) read(ctx context.Context, fn func(t *projection.Table)) error {
	if err := s.lock(); err != nil {
		return err
	}
	fn(s.mu.table)
	seq := s.mu.table.Seq()
	s.mu.Unlock()
	return s.log.WaitDurable(ctx, seq)
}

// View runs fn on the lease table, under the service's lock; fn must not keep
// the table or block. Tests and the daemon's read paths use it.
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
// last one and either enough of them (SnapshotEvery) or enough time
// (SnapshotInterval) passed, or if force is set.
func (s *Service) snapshot(force bool) error {
	s.mu.Lock()
	seq, now := s.mu.table.Seq(), s.now()
	due := seq > s.mu.lastSnap && (force ||
		(s.every > 0 && seq-s.mu.lastSnap >= uint64(s.every)) ||
		(s.period > 0 && now-s.mu.snapAt >= int64(s.period)))
	if !due || s.mu.err != nil {
		s.mu.Unlock()
		return nil
	}
	data := s.mu.table.Snapshot()
	s.mu.lastSnap, s.mu.snapAt = seq, now
	s.mu.Unlock()
	if err := s.log.WaitDurable(context.Background(), seq); err != nil {
		return err
	}
	if err := s.log.PutSnapshot(seq, data); err != nil {
		return fmt.Errorf("lease: snapshot at seq %d: %w", seq, err)
	}
	s.logger.Info().Uint64("seq", seq).Int("bytes", len(data)).Msg("snapshot written")
	return nil
}
