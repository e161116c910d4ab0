package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
)

// The command path. Every command of the service (Open's daemon.started,
// Submit, Cancel, Kill, Stop, Acquire, Start, Heartbeat, Report, Sweep) and
// every read of the table takes it, through command:
//
//	lock      the service's mutex; refused at once if the service failed
//	decide    under the mutex: reads the table (and the archive), stages what
//	          it records with tx.stage (after daemon.resumed when the daemon
//	          was absent: awakeLocked), each event stamped, folded, logged;
//	          makes its reply from the table as folded
//	unlock    the one unlock of the path
//	wait      outside the mutex, before anyone hears of the reply: each
//	          commit staged until durable (a failure fails the service); with
//	          none staged, every event the reply could have read, unless the
//	          decision failed or says its reply tells nothing a crash could
//	          undo (tx.noReadWait)
//
// So decisions are serialised in the order they are staged, concurrent
// commands share fsyncs, and no reply tells of an event a crash could undo.

// tx is one command's turn under the service's mutex: what decide is given.
type tx struct {
	s       *Service
	name    string // the command, for the log line of a failure
	now     int64  // the clock's reading (ns), taken at most once
	timed   bool
	commits []*eventlog.Commit // staged, in order: each is waited for

	// noReadWait says the reply holds nothing a crash could undo (no grant
	// yet, a stop already under way, a sweep), so that a command that stages
	// nothing returns without waiting for durability.
	noReadWait bool
}

// command runs decide as the command called name, under the service's mutex,
// and waits, outside it, until its reply can be given (see above). decide's
// reply and error are returned as it made them, after the wait for what it
// staged; a failed wait returns R's zero value with the wait's error. ctx
// bounds the wait for what a reply read only: a staged commit is always
// waited for, since its wait releases the batch and Log.Close waits for it.
func command[R any](ctx context.Context, s *Service, name string, decide func(t *tx) (R, error)) (R, error) {
	t := &tx{s: s, name: name}
	var r R
	s.mu.Lock()
	err := s.failedLocked(name)
	if err == nil {
		r, err = decide(t)
	}
	seq := s.mu.table.Seq()
	s.mu.Unlock()
	if werr := t.wait(ctx, seq, err); werr != nil {
		var zero R
		return zero, werr
	}
	return r, err
}

// wait waits for what t staged, or, if it staged nothing and its decision
// neither failed nor said otherwise, until every event up to seq (what the
// table held when the decision was made) is durable. A decision's own error
// wins over its commits': they are waited for all the same.
func (t *tx) wait(ctx context.Context, seq uint64, decided error) error {
	var err error
	for _, c := range t.commits {
		if cerr := c.Wait(); cerr != nil {
			t.s.mu.Lock()
			t.s.failLocked(cerr, t.name)
			cerr = t.s.mu.err
			t.s.mu.Unlock()
			if err == nil {
				err = cerr
			}
		}
	}
	switch {
	case decided != nil:
		return nil
	case len(t.commits) == 0 && !t.noReadWait:
		return t.s.waitDurable(ctx, seq)
	}
	return err
}

// clock returns the time the command decides by: the clock is read once, the
// first time it is asked for, so that a command that records nothing reads
// no clock.
func (t *tx) clock() int64 {
	if !t.timed {
		t.now, t.timed = t.s.now(), true
	}
	return t.now
}

// stage records evs: it stamps them (time, ULID), stages them into the log
// and folds them into the table, after the daemon.resumed that awakeLocked
// asks for, if any. It returns the events as staged (numbered; a resume
// first). Nothing to record records nothing, not even a resume: a command
// that changes nothing touches no deadline.
func (t *tx) stage(evs ...event.Event) ([]event.Event, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	return t.commitLocked(evs)
}

// resume records the daemon's absence, if awakeLocked finds one, as its own
// batch: the sweep's first step, so that the table judges silence in present
// time, the gap taken out.
func (t *tx) resume() error {
	_, err := t.commitLocked(nil)
	return err
}

func (t *tx) commitLocked(evs []event.Event) ([]event.Event, error) {
	s, now := t.s, t.clock()
	if s.mu.err != nil {
		return nil, s.mu.err
	}
	if resume := s.awakeLocked(now); resume != nil {
		evs = append(resume, evs...)
	}
	if len(evs) == 0 {
		return nil, nil
	}
	for i := range evs {
		id, err := ulid.New(ulid.Timestamp(time.Unix(0, now)), s.mu.entropy)
		if err != nil {
			return nil, fmt.Errorf("lease: mint event id: %w", err)
		}
		evs[i].ID, evs[i].Time = id, now
	}
	linkStarts(evs, func() uint64 { return s.log.LastSeq() + 1 })
	// The events are folded once numbered, before they enter the pipeline,
	// so that the archive records of the jobs they end go in the same batch.
	folded := false
	c, err := s.log.Stage(evs, func(evs []event.Event) ([]eventlog.Record, error) {
		if err := checkStarts(evs); err != nil {
			return nil, err // nothing folded, nothing written
		}
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
		if folded || logFailure(err) {
			s.failLocked(err, t.name)
			return nil, s.mu.err
		}
		return nil, err
	}
	t.commits = append(t.commits, c)
	s.mu.lastSeen, s.mu.slept = max(s.mu.lastSeen, now), s.mu.sleptNow
	queued := false
	for i := range evs {
		queued = queued || evs[i].Type == event.TypeQueued
		s.logEvent(&evs[i])
	}
	if queued {
		s.wakeLocked()
	}
	return evs, nil
}

// wakeLocked wakes every acquire waiting for a job: a job was queued, or the
// daemon is stopping.
func (s *Service) wakeLocked() {
	close(s.mu.queued)
	s.mu.queued = make(chan struct{})
}

// awakeLocked is the rule every command and every sweep follows before it
// touches a deadline (docs/design.md §4): if the daemon's last sweep or commit is
// more than grace ago on its clock, the daemon itself was absent — asleep,
// stopped, starved — and the whole gap is recorded first, as daemon.resumed,
// which takes it out of every deadline. A sleep of the host shorter than that
// is the daemon's absence too (its clock knows how long the host slept: see
// sleeper), and is recorded as daemon.resumed with the sleep as its gap;
// erring this way only delays expiries. It returns that event, or nil when
// the daemon was present (and then counts it as seen now: moving lastSeen on
// hides no gap, since none was pending). tx.stage applies it to every
// command's events; Sweep, which judges deadlines, calls it through
// tx.resume before it judges.
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

// failedLocked returns the error that failed the service. The log may have
// failed under something other than one of its commands (a snapshot's sync,
// Pebble's Fatalf in a background flush): the service fails with it the
// first time it looks. during names who looks, for the log line.
func (s *Service) failedLocked(during string) error {
	if s.mu.err == nil {
		if err := s.log.Err(); err != nil {
			s.failLocked(err, during)
		}
	}
	return s.mu.err
}

// failLocked fails the service with err, found during the command (or read)
// so named, if it has not failed already: every command from now on is
// refused with ErrFailed, until the daemon is restarted. The error keeps err
// in its chain: a caller may still ask what failed the log (a deposed
// replica: jetstream.ErrDeposed).
func (s *Service) failLocked(err error, during string) {
	if s.mu.err == nil {
		s.mu.err = fmt.Errorf("%w: %w", ErrFailed, err)
		s.failed.Store(true)
		ev := s.logger.Error().Err(err)
		if during != "" {
			ev = ev.Str("command", during)
		}
		ev.Msg("lease service failed: refusing every command until restarted")
	}
}

// The log's failures never leave the service as the log's own errors: a
// failed log, or one closed under the service, fails the service wherever
// it is met — in a command, in the wait for durability after one, in a read
// outside the mutex — and the caller gets ErrFailed, the log's error kept in
// its chain. A caller so matches lease's sentinels alone.

// logFailure reports whether err says the log failed or was closed.
func logFailure(err error) bool {
	return errors.Is(err, eventlog.ErrFailed) || errors.Is(err, eventlog.ErrClosed)
}

// logErr is err, met outside the service's mutex (a wait for durability, a
// scan of the archive, a query), as the service's caller gets it: a failure
// of the log fails the service and is refused with ErrFailed; any other
// error (nil, a context's, a corrupt record) is returned as it is.
func (s *Service) logErr(err error, during string) error {
	if !logFailure(err) {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failLocked(err, during)
	return s.mu.err
}

// waitDurable is the log's WaitDurable, its failure the service's.
func (s *Service) waitDurable(ctx context.Context, seq uint64) error {
	return s.logErr(s.log.WaitDurable(ctx, seq), "wait for durability")
}
