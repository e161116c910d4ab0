package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/replay"
)

// Leadership: one active daemon, warm standbys (docs/cluster.md §2-3). A key
// in a KV bucket with a TTL says who should append (liveness): the active
// daemon refreshes it; when it stops, the key expires and a standby creates
// it. The stream's expected last sequence says who can (safety): whatever
// the key and the clocks say, an append that does not follow the stream's
// end is refused. So the key needs no more than to be usually right.

// Leader configures leadership (Options.Leader).
type Leader struct {
	// ID names this daemon in the key (the API address it advertises, so
	// that a standby can say where the active daemon is).
	ID string
	// TTL is how long the key outlives the last refresh of a daemon that
	// stopped: the longest a standby waits before it takes over. The active
	// daemon refreshes it every TTL/3 and stops appending once it has not
	// for TTL. docs/cluster.md: grace/2.
	TTL time.Duration
}

const leaderKey = "leader"

// errCache marks a failure of the cache itself (a fold, an import, a
// snapshot), as opposed to NATS not answering yet: a standby or a new
// leader stops on it rather than trying again.
var errCache = errors.New("jetstream: the cache")

// Campaign returns once this daemon holds the leadership, its cache caught
// up with the stream's end: the log then appends. Until then it is a
// standby: it tails the stream into its cache (so that its table is current
// when it takes over) and tries for the key every TTL/4. With no
// Options.Leader it returns at once. After it, Lost is closed if the
// leadership is lost, and the log refuses every append from then on.
func (s *Store) Campaign(ctx context.Context) error {
	l := s.opts.Leader
	if l == nil {
		return nil
	}
	table, _, err := replay.Rebuild(s.log, s.logger)
	if err != nil {
		return fmt.Errorf("jetstream: cache: %w", err)
	}
	table.SetRetire(projection.RetireRecord)
	poll := l.TTL / 4
	// A standby waits out what NATS cannot do yet (a cluster restarting, a
	// bucket or stream without a leader): it warns and tries again, until
	// ctx ends; only its own cache failing stops it.
	retry := func(what string, err error) error {
		s.logger.Warn().Err(err).Msg("jetstream: " + what + "; trying again")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
			return nil
		}
	}
	var kv natsjs.KeyValue
	for kv == nil {
		bctx, cancel := context.WithTimeout(ctx, s.attempt())
		kv, err = s.leaderBucket(bctx)
		cancel()
		if err != nil {
			if err := retry("the leadership bucket", err); err != nil {
				return err
			}
		}
	}
	for {
		sent := time.Now()
		actx, cancel := context.WithTimeout(ctx, s.attempt())
		rev, err := kv.Create(actx, leaderKey, []byte(l.ID))
		cancel()
		if err == nil {
			return s.lead(ctx, kv, rev, sent)
		}
		if errors.Is(err, natsjs.ErrKeyExists) {
			if !s.tookOver.Load() {
				active, _ := s.Active(ctx)
				s.logger.Info().Str("active", active).Msg("jetstream: standby: another daemon leads the stream")
			}
			s.tookOver.Store(true)
		} else if err := retry("campaign for the leadership", err); err != nil {
			return err
		}
		if err := s.tail(ctx, table, poll); err != nil {
			if ctx.Err() != nil || errors.Is(err, errCache) {
				return err
			}
			if err := retry("tail the stream", err); err != nil {
				return err
			}
		}
	}
}

// Active returns the ID in the leadership key: the active daemon, for a
// standby to redirect to; "" when there is none.
func (s *Store) Active(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.attempt())
	defer cancel()
	kv, err := s.leaderBucket(ctx)
	if err != nil {
		return "", err
	}
	e, err := kv.Get(ctx, leaderKey)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("jetstream: read the leadership: %w", err)
	}
	return string(e.Value()), nil
}

func (s *Store) leaderBucket(ctx context.Context) (natsjs.KeyValue, error) {
	name := s.opts.Stream + "_LEADER"
	kv, err := s.js.KeyValue(ctx, name)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		kv, err = s.js.CreateKeyValue(ctx, natsjs.KeyValueConfig{
			Bucket: name, Description: "leaselog: the active daemon of stream " + s.opts.Stream,
			History: 1, TTL: s.opts.Leader.TTL, Replicas: s.opts.Replicas, Storage: natsjs.FileStorage,
		})
		if errors.Is(err, natsjs.ErrBucketExists) {
			kv, err = s.js.KeyValue(ctx, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: leadership bucket %s: %w", name, err)
	}
	return kv, nil
}

// tail imports what the stream holds past the cache, for up to d: each
// message as soon as it is there, read one by one (read), every read
// bounded by the end of d too, so that a stream electing a leader never
// keeps the standby from campaigning: a read the stream leader's death left
// unanswered (an attempt, seconds) would otherwise delay a takeover by that.
// The imports of a run of messages are staged and waited for together, when
// the stream has no more or every pullBatch, so that they share the cache's
// fsyncs: one each bounded a standby's pace by its disk's, below a busy
// active daemon's.
func (s *Store) tail(ctx context.Context, table *projection.Table, d time.Duration) (err error) {
	window, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var staged imports
	defer func() { err = errors.Join(err, staged.wait()) }()
	checked := false
	for window.Err() == nil {
		seq := s.StreamSeq() + 1
		data, ok, err := s.read(window, seq)
		if err != nil {
			if ctx.Err() == nil && window.Err() != nil {
				return nil // d is over: the campaign goes on, the read with it later
			}
			return fmt.Errorf("jetstream: tail the stream at seq %d: %w", seq, err)
		}
		if !ok {
			if err := staged.wait(); err != nil {
				return err
			}
			if !checked { // once a window: a question to the stream
				checked = true
				if err := s.purgedPast(window, seq); err != nil {
					return err
				}
			}
			select {
			case <-window.Done():
			case <-time.After(d / 4):
			}
			continue
		}
		if err := staged.add(s, table, seq, data); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// purgedPast returns ErrBehind (and errCache: the campaign stops) if the
// stream was purged past seq, which the cache needs next: the message is
// not there, and will never be.
func (s *Store) purgedPast(ctx context.Context, seq uint64) error {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return nil // a question for the next window
	}
	if seq < info.State.FirstSeq {
		return fmt.Errorf("%w: %w: it needs stream seq %d, the stream begins at %d", errCache, ErrBehind, seq, info.State.FirstSeq)
	}
	return nil
}

// lead makes this daemon the active one: the key, created at revision rev
// by a request sent at sent, refreshed from now on (until Close, or until it
// cannot be), the cache caught up to the stream's end — retried while NATS
// cannot answer yet (a stream electing a leader), so long as the key is
// held — and then the log appends.
func (s *Store) lead(ctx context.Context, kv natsjs.KeyValue, rev uint64, sent time.Time) error {
	s.leaderRev = rev
	refresh, cancel := context.WithCancel(context.Background())
	stop := func(release bool) {
		cancel()
		<-s.leading
		if release { // a graceful stop: a standby need not wait for the TTL
			dctx, dcancel := context.WithTimeout(context.Background(), s.attempt())
			defer dcancel()
			_ = kv.Delete(dctx, leaderKey, natsjs.LastRevision(s.leaderRev))
		}
	}
	s.mu.Lock()
	s.mu.stopLeading = stop
	s.mu.Unlock()
	go s.refresh(refresh, kv, sent)
	for {
		err := s.catchUp(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil || errors.Is(err, errCache) {
			s.abdicate()
			return err
		}
		s.logger.Warn().Err(err).Msg("jetstream: catch up to lead; trying again")
		select {
		case <-s.lost:
			s.abdicate()
			return s.deposed()
		case <-ctx.Done():
			s.abdicate()
			return ctx.Err()
		case <-time.After(s.opts.Leader.TTL / 4):
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.deposed != nil {
		return s.mu.deposed
	}
	s.mu.publishing = true
	s.logger.Info().Str("id", s.opts.Leader.ID).Uint64("stream_seq", s.mu.last).Msg("jetstream: leading")
	return nil
}

// abdicate gives the leadership up, the key deleted, after a lead that
// could not catch up.
func (s *Store) abdicate() {
	s.mu.Lock()
	stop := s.mu.stopLeading
	s.mu.stopLeading = nil
	s.mu.Unlock()
	if stop != nil {
		stop(true)
	}
}

func (s *Store) deposed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.deposed
}

// refresh keeps the key until ctx ends, the last write of it sent at held.
// The first refresh refused (the key is another's) deposes this daemon, and
// so does its deadline: held + TTL×9/10, counted from when the write that
// held the key was sent, never from its answer. NATS expires the key TTL
// after it stored that write, which was after the send, so the daemon
// deposes itself — and stops serving — before a standby can win the key,
// whatever the network delayed; the tenth is for its own timer firing late
// on a loaded host. A refresh is tried every TTL/4, three before the
// deadline, and none outlives it.
func (s *Store) refresh(ctx context.Context, kv natsjs.KeyValue, held time.Time) {
	defer close(s.leading)
	ttl := s.opts.Leader.TTL
	deadline := func() time.Time { return held.Add(ttl - ttl/10) }
	expire := time.NewTimer(time.Until(deadline()))
	defer expire.Stop()
	tick := time.NewTicker(ttl / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-expire.C:
			s.depose(fmt.Errorf("%w: the leadership key not refreshed within %v of its last write", ErrDeposed, ttl-ttl/10))
			return
		case <-tick.C:
		}
		sent := time.Now()
		until := sent.Add(s.attempt())
		if d := deadline(); d.Before(until) {
			until = d
		}
		uctx, cancel := context.WithDeadline(ctx, until)
		rev, err := kv.Update(uctx, leaderKey, []byte(s.opts.Leader.ID), s.leaderRev)
		cancel()
		switch {
		case err == nil:
			s.leaderRev, held = rev, sent
			expire.Reset(time.Until(deadline()))
		case ctx.Err() != nil:
			return
		case errors.Is(err, natsjs.ErrKeyRevisionMismatch), errors.Is(err, natsjs.ErrKeyNotFound), errors.Is(err, natsjs.ErrKeyExists):
			s.depose(fmt.Errorf("%w: the leadership key is another's: %v", ErrDeposed, err))
			return
		case !time.Now().Before(deadline()):
			s.depose(fmt.Errorf("%w: the leadership key not refreshed within %v of its last write: %v", ErrDeposed, ttl-ttl/10, err))
			return
		}
	}
}

// depose stops this daemon: the log fails with err at once, so that its
// service refuses every call from now on, reads included (a standby may
// win the key next), every later batch is refused, and Lost is closed.
func (s *Store) depose(err error) {
	s.logger.Error().Err(err).Msg("jetstream: leadership lost: refusing every call")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.deposed == nil {
		s.mu.deposed = err
		s.mu.publishing = false
		s.log.Fail(err)
		close(s.lost)
	}
}

// TookOver says whether Campaign found another daemon leading and waited
// for its leadership to lapse: the daemon.started it records then has
// TakeoverReason.
func (s *Store) TookOver() bool { return s.tookOver.Load() }

// Lost is closed when this daemon loses the leadership it won (Campaign).
func (s *Store) Lost() <-chan struct{} { return s.lost }

// TakeoverReason is the reason of the daemon.started a standby records when
// it takes over (lease.Options.StartReason).
const TakeoverReason = "takeover"
