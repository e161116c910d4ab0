package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Reading the stream back: a catch-up (a rebuilt cache, a new leader's last
// messages) reads a range in batches through an ephemeral pull consumer of
// its own; the standby's tail reads the next message alone (read).
//
// Not an ordered consumer: its Fetch re-creates its consumer, without end,
// while the stream has no leader, which hung a takeover whose stream leader
// went down with the active daemon. Here every request (the consumer's
// creation, each fetch) is bounded by an attempt, and a failed one is tried
// again from the first message not yet handed over, with a new consumer, a
// few times (pullAttempts without progress) before the catch-up fails — and
// its caller, a new leader holding the key, tries the catch-up again.

const (
	// pullBatch is the most messages one fetch asks for: one round trip
	// for up to that many batches, instead of one each.
	pullBatch = 512
	// pullBytes bounds what one fetch brings: a batch is a message of up
	// to max_payload (1 MB by default).
	pullBytes = 8 << 20
	// pullAttempts is how many failed requests in a row, with no message
	// between them, a read of a range tries before it fails.
	pullAttempts = 3
)

// errHandler wraps the error of pull's fn, which ends a read at once: the
// cache failed, not NATS.
type errHandler struct{ err error }

func (e errHandler) Error() string { return e.err.Error() }
func (e errHandler) Unwrap() error { return e.err }

// pull hands fn every message of the stream from from to to, in order.
func (s *Store) pull(ctx context.Context, from, to uint64, fn func(sseq uint64, data []byte) error) error {
	failed := 0
	for seq := from; seq <= to; {
		next, err := s.fetchRange(ctx, seq, to, fn)
		if err == nil {
			return nil
		}
		if h := (errHandler{}); errors.As(err, &h) {
			return h.err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("jetstream: read the stream at seq %d: %w", next, ctx.Err())
		}
		if next > seq {
			failed = 0
		}
		if failed++; failed >= pullAttempts {
			return fmt.Errorf("jetstream: read the stream at seq %d (of %d..%d): %w", next, from, to, err)
		}
		s.logger.Warn().Err(err).Uint64("seq", next).Msg("jetstream: reading the stream; trying again")
		select {
		case <-ctx.Done():
			return fmt.Errorf("jetstream: read the stream at seq %d: %w", next, ctx.Err())
		case <-time.After(s.attempt() / 4):
		}
		seq = next
	}
	return nil
}

// fetchRange reads from..to through a consumer of its own, and returns the
// first seq it did not hand to fn, and why (nil once to was handed over).
func (s *Store) fetchRange(ctx context.Context, from, to uint64, fn func(sseq uint64, data []byte) error) (uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, s.attempt())
	cons, err := s.stream.CreateConsumer(cctx, natsjs.ConsumerConfig{
		Description:   "leaselog: a catch-up of the cache",
		DeliverPolicy: natsjs.DeliverByStartSequencePolicy, OptStartSeq: from,
		AckPolicy: natsjs.AckNonePolicy, MemoryStorage: true, Replicas: 1,
		// Removed by the server if this daemon dies in the middle.
		InactiveThreshold: s.opts.Timeout,
	})
	cancel()
	if err != nil {
		return from, fmt.Errorf("create a consumer: %w", err)
	}
	seq := from
	for seq <= to {
		batch, err := cons.Fetch(int(min(to-seq+1, pullBatch)), natsjs.FetchMaxBytes(pullBytes), natsjs.FetchMaxWait(s.attempt()))
		if err != nil {
			return seq, fmt.Errorf("fetch: %w", err)
		}
		got := seq
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return seq, fmt.Errorf("fetch: %w", err)
			}
			if md.Sequence.Stream != seq {
				return seq, fmt.Errorf("fetch: stream seq %d where %d was expected", md.Sequence.Stream, seq)
			}
			if err := fn(seq, m.Data()); err != nil {
				return seq, errHandler{err}
			}
			seq++
		}
		if err := batch.Error(); err != nil {
			return seq, fmt.Errorf("fetch: %w", err)
		}
		if seq == got {
			return seq, fmt.Errorf("fetch: no message at seq %d where the stream ends at %d", seq, to)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, s.attempt())
	defer cancel()
	// Left to the server's InactiveThreshold if it cannot be deleted now.
	_ = s.stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
	return seq, nil
}

// read returns the message at stream seq seq, or false if the stream holds
// none there (yet); the request is bounded by an attempt.
func (s *Store) read(ctx context.Context, seq uint64) ([]byte, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.attempt())
	defer cancel()
	raw, err := s.stream.GetMsg(ctx, seq)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return raw.Data, true, nil
}
