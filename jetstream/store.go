// Package jetstream is the store engine that keeps the log on a NATS
// JetStream stream, the source of truth, with the local Pebble store
// (package eventlog) as its cache: [store] engine = "jetstream".
//
// It owns the stream (created on first use: one subject, no message ever
// deleted, purged only below a checkpoint), the encoding of a batch as one
// message (batch.go), the checkpoints of the compacted cache that the stream
// is purged below and a cache is rebuilt from (checkpoint.go), the append
// path (each batch published under the log's mutex with the stream sequence
// it expects to follow, so that only a daemon whose view is the stream's end
// can append: a deposed one gets ErrDeposed and its log fail-stops), and the
// cache (cache.go): checked against the stream on open, deleted and rebuilt
// when it does not match, caught up with what other daemons appended, read
// back in bounded batches (read.go); and the leadership among the daemons of
// one stream (leader.go).
//
// Everything above the log (lease, replay, server) sees an ordinary
// *eventlog.Log: sequence numbers, fencing tokens and the event encoding
// are those of the Pebble engine. docs/cluster.md argues the design.
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
)

// ErrDeposed is the cause of the failure of a log whose append the stream
// refused because another daemon appended first: this daemon's view is no
// longer the stream's end, and it must not serve another command. The log's
// error wraps both eventlog.ErrFailed and ErrDeposed.
var ErrDeposed = errors.New("jetstream: another daemon appended to the stream: this one is deposed")

// ErrNotCache is returned by Open when the store in Options.Dir holds events
// that no stream put there (a Pebble store of the default engine): it is not
// deleted, since it may be the only copy of its log.
var ErrNotCache = errors.New("jetstream: the store holds events that are not from a stream")

// errNotActive refuses a publish before the cache has caught up.
var errNotActive = errors.New("jetstream: the store is not appending (catching up, or closed)")

// Options configures Open.
type Options struct {
	// Servers are the NATS URLs ("nats://host:4222"); any one will do, the
	// client learns the rest of the cluster from it.
	Servers []string
	// Stream is the stream's name; its one subject is "leaselog.<Stream>".
	Stream string
	// Replicas is the stream's replication factor when Open creates it; 0
	// means 1. Three in production.
	Replicas int
	// Dir is the cache: a Pebble store that Open deletes and rebuilds when it
	// does not match the stream. Nothing else may live in it.
	Dir string
	// Log configures the cache (its filesystem, logger, metrics). Replica is
	// set by Open.
	Log eventlog.Options
	// Logger receives what the engine does (catch-up, a rebuilt cache).
	Logger zerolog.Logger
	// Timeout bounds each call to JetStream, and how long a batch may wait
	// for its acknowledgement (across reconnects and the election of a new
	// stream leader) before the log fails; 0 means 10 s.
	Timeout time.Duration
	// Leader, if set, makes this daemon one of several on the stream: Open
	// leaves the log refusing appends until Campaign has won the
	// leadership (leader.go). nil: the daemon appends from Open on, fenced
	// by the stream alone.
	Leader *Leader
	// CheckpointBytes is the least the stream holds before RunCheckpoints
	// writes a checkpoint (checkpoint.go); 0 means 64 MiB.
	CheckpointBytes uint64
}

func (o *Options) check() error {
	if len(o.Servers) == 0 {
		return errors.New("jetstream: no servers")
	}
	if o.Stream == "" || strings.ContainsAny(o.Stream, ".*> \t\r\n/\\") {
		return fmt.Errorf("jetstream: stream name %q: must be non-empty, without spaces, dots, slashes, * or >", o.Stream)
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Replicas < 1 || o.Replicas > 5 {
		return fmt.Errorf("jetstream: replicas: must be 1 to 5, is %d", o.Replicas)
	}
	if o.Dir == "" {
		return errors.New("jetstream: no cache directory")
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.CheckpointBytes == 0 {
		o.CheckpointBytes = 64 << 20
	}
	if l := o.Leader; l != nil && (l.ID == "" || l.TTL <= 0) {
		return fmt.Errorf("jetstream: leader: an id and a TTL are needed, have %q and %v", l.ID, l.TTL)
	}
	return nil
}

// Store is a log kept on a stream, with its cache open.
type Store struct {
	opts    Options
	subject string
	nc      *nats.Conn
	js      natsjs.JetStream
	stream  natsjs.Stream
	log     *eventlog.Log
	logger  zerolog.Logger

	leading   chan struct{} // closed when the leadership's refresh stops
	lost      chan struct{} // closed when the leadership is lost (Lost)
	leaderRev uint64        // the key's revision: lead, then refresh alone
	tookOver  atomic.Bool   // Campaign waited for another's leadership to lapse

	mu struct {
		sync.Mutex
		last        uint64 // stream seq of the last batch in the cache (imported or published)
		publishing  bool
		deposed     error              // why this daemon lost the leadership
		stopLeading func(release bool) // set while leading
	}
}

// Open connects to NATS, creates the stream if it does not exist, opens the
// cache (rebuilding it if it does not match the stream) and catches it up
// with the stream. The first batch the log then appends expects the stream
// to end where the catch-up found it.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	s := &Store{opts: opts, subject: "leaselog." + opts.Stream, logger: opts.Logger,
		leading: make(chan struct{}), lost: make(chan struct{})}
	nc, err := nats.Connect(strings.Join(opts.Servers, ","), nats.Name("leaselog"),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.Timeout(opts.Timeout))
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect to %s: %w", strings.Join(opts.Servers, ","), err)
	}
	s.nc = nc
	if err := s.open(ctx); err != nil {
		s.nc.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) open(ctx context.Context) error {
	var err error
	// An ack that does not come within an attempt is asked for (await):
	// a connection lost with its publishes, or a stream leader that died
	// with them, costs an attempt, not the whole Timeout.
	s.js, err = natsjs.New(s.nc, natsjs.WithPublishAsyncTimeout(s.attempt()), natsjs.WithDefaultTimeout(s.opts.Timeout))
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if s.stream, err = s.ensureStream(ctx); err != nil {
		return err
	}
	if err := s.openCache(ctx); err != nil {
		return err
	}
	if err := s.catchUp(ctx); err != nil {
		s.log.Close()
		return err
	}
	s.mu.Lock()
	s.mu.publishing = s.opts.Leader == nil // else once Campaign wins
	s.mu.Unlock()
	return nil
}

// ensureStream returns the stream, created if it does not exist: limits
// retention with no limit, no deletes — the stream is the log — and purges
// only by the active daemon, of what a checkpoint holds (checkpoint.go).
func (s *Store) ensureStream(ctx context.Context) (natsjs.Stream, error) {
	st, err := s.js.Stream(ctx, s.opts.Stream)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		st, err = s.createStream(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %s: %w", s.opts.Stream, err)
	}
	if subj := st.CachedInfo().Config.Subjects; len(subj) != 1 || subj[0] != s.subject {
		return nil, fmt.Errorf("jetstream: stream %s has subjects %v, not leaselog's %q", s.opts.Stream, subj, s.subject)
	}
	return st, nil
}

// createStream creates the stream. A cluster that is still forming refuses
// it for a while (no JetStream leader yet, a peer not yet known): that is
// retried, until Timeout.
func (s *Store) createStream(ctx context.Context) (natsjs.Stream, error) {
	deadline := time.Now().Add(s.opts.Timeout)
	for {
		st, err := s.js.CreateStream(ctx, natsjs.StreamConfig{
			Name:        s.opts.Stream,
			Description: "leaselog event log: one message per batch of events",
			Subjects:    []string{s.subject},
			Retention:   natsjs.LimitsPolicy,
			Storage:     natsjs.FileStorage,
			Replicas:    s.opts.Replicas,
			Discard:     natsjs.DiscardNew,
			MaxMsgs:     -1,
			MaxBytes:    -1,
			DenyDelete:  true,
			DenyPurge:   false,           // the active daemon purges below its checkpoints (checkpoint.go)
			Duplicates:  2 * time.Minute, // a batch republished after a lost ack is stored once
		})
		if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) { // another daemon created it first
			return s.js.Stream(ctx, s.opts.Stream)
		}
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return st, err
		}
		s.logger.Warn().Err(err).Msg("jetstream: the stream cannot be created yet; retrying")
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// attempt is how long one publish, or one question to the stream, may take
// before await asks again.
func (s *Store) attempt() time.Duration { return s.opts.Timeout / 5 }

// Log is the log, to open the lease service on. Closing the Store closes it.
func (s *Store) Log() *eventlog.Log { return s.log }

// StreamSeq is the stream sequence of the last batch in the cache.
func (s *Store) StreamSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.last
}

// Close closes the cache (after every staged batch has been waited for),
// gives up the leadership if it holds it, and closes the connection.
func (s *Store) Close() error {
	s.mu.Lock()
	s.mu.publishing = false
	stop := s.mu.stopLeading
	s.mu.stopLeading = nil
	s.mu.Unlock()
	err := s.log.Close()
	if stop != nil {
		stop(true)
	}
	s.nc.Close()
	return err
}

// Publish is the log's Replica: it publishes the batch with the stream
// sequence it must follow and returns its marker (the stream sequence it
// will have) and a wait for its acknowledgement. Called under the log's
// mutex, so batches are published in log order.
func (s *Store) Publish(evs []event.Event) ([]byte, func() error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.mu.publishing {
		if s.mu.deposed != nil {
			return nil, nil, s.mu.deposed
		}
		return nil, nil, errNotActive
	}
	seq := s.mu.last + 1
	// The dedup id of a republished batch, unique: no two daemons mint one ULID.
	id := strconv.FormatUint(evs[0].Seq, 10) + "-" + evs[0].ID.String()
	data := encodeBatch(evs)
	fut, err := s.js.PublishMsgAsync(s.message(data, seq, id))
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: publish stream seq %d: %w", seq, err)
	}
	s.mu.last = seq
	return marker(seq), func() error { return s.await(fut, data, seq, id) }, nil
}

func (s *Store) message(data []byte, seq uint64, id string) *nats.Msg {
	m := nats.NewMsg(s.subject)
	m.Data = data
	m.Header.Set(natsjs.ExpectedLastSeqHeader, strconv.FormatUint(seq-1, 10))
	m.Header.Set(natsjs.MsgIDHeader, id)
	return m
}

// await waits for the acknowledgement of the batch published as stream
// sequence seq. An ack that does not come (a lost connection, a stream
// leader that died with it) is not a refusal: the stream is asked whether it
// holds the batch, and the batch is published again, with the same dedup id
// and expected sequence, until Timeout. So appends survive the loss of the
// stream leader, and nothing can be stored twice or out of place: a batch
// another daemon got in first is ErrDeposed.
func (s *Store) await(fut natsjs.PubAckFuture, data []byte, seq uint64, id string) error {
	deadline := time.Now().Add(s.opts.Timeout)
	pause := 10 * time.Millisecond
	for {
		var err error
		if fut != nil {
			select {
			case ack := <-fut.Ok():
				if ack.Sequence != seq {
					return fmt.Errorf("jetstream: batch %s acknowledged at stream seq %d, published as %d", id, ack.Sequence, seq)
				}
				return nil
			case err = <-fut.Err():
			}
		}
		held, herr := s.holds(seq, id)
		switch {
		case herr == nil && held == heldOurs:
			return nil
		case herr == nil && held == heldOther:
			return fmt.Errorf("%w: stream seq %d holds another daemon's batch (publish: %v)", ErrDeposed, seq, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jetstream: batch %s at stream seq %d not acknowledged within %v: %w", id, seq, s.opts.Timeout, errors.Join(err, herr))
		}
		// Not in the stream yet: an earlier batch may be missing too (its
		// own waiter republishes it), or the stream is electing a leader.
		time.Sleep(pause)
		pause = min(2*pause, 250*time.Millisecond)
		if fut, err = s.js.PublishMsgAsync(s.message(data, seq, id)); err != nil {
			fut = nil
		}
	}
}

type held int

const (
	heldNone held = iota
	heldOurs
	heldOther
)

// holds says whether the stream holds a message at seq, and whether it is
// the batch with dedup id id.
func (s *Store) holds(seq uint64, id string) (held, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.attempt())
	defer cancel()
	raw, err := s.stream.GetMsg(ctx, seq)
	switch {
	case errors.Is(err, natsjs.ErrMsgNotFound):
		return heldNone, nil
	case err != nil:
		return heldNone, err
	case raw.Header.Get(natsjs.MsgIDHeader) == id:
		return heldOurs, nil
	}
	return heldOther, nil
}
