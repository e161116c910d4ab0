package eventlog

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/leaselog/leaselog/event"
)

// Commit is a batch of events that has entered the commit pipeline: its
// sequence numbers are final and it is ordered before every later batch, but
// it is not yet durable. Wait must be called exactly once.
type Commit struct {
	log         *Log
	batch       *pebble.Batch
	first, last uint64
	replicated  func() error // the Replica's wait, if the log has one
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
	if c.replicated != nil {
		if err := c.replicated(); err != nil {
			c.batch.Close()
			return c.log.fail(fmt.Errorf("eventlog: replicate seq %d..%d: %w", c.first, c.last, err), false)
		}
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
		if evs[i].Type == event.TypeHeartbeats {
			return nil, fmt.Errorf("eventlog: append %s: written by a compaction in place, never appended", evs[i].Type)
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
	what := span{first: first, last: first + uint64(len(evs)) - 1}
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
	replicated, err := l.publishLocked(b, evs, what)
	if err != nil {
		return nil, err
	}
	if err := l.applyLocked(b, what); err != nil {
		return nil, err
	}
	l.mu.next, l.mu.run = first+uint64(len(evs)), run
	l.inflight.Add(1)
	return &Commit{log: l, batch: b, first: first, last: l.mu.next - 1, replicated: replicated}, nil
}

// span names a batch in errors, formatted only when one is made: a name
// made for every batch would be an allocation on every call.
type span struct {
	first, last uint64
	imported    bool   // a replica's events, imported
	other       string // a batch of no events: its name as it is
}

func (s span) String() string {
	switch {
	case s.other != "":
		return s.other
	case s.imported:
		return fmt.Sprintf("import of seq %d..%d", s.first, s.last)
	}
	return fmt.Sprintf("seq %d..%d", s.first, s.last)
}

// applyLocked hands b to Pebble's commit pipeline without waiting for its
// sync. what names the batch in errors. On error the log has failed, and b is
// left to Pebble, which may still hold it. The caller holds mu, which keeps
// every write of the log out of the pipeline once it has failed: Pebble's
// pipeline does not survive some of its own failures (see wedged).
func (l *Log) applyLocked(b *pebble.Batch, what span) (err error) {
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
