package jetstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/replay"
)

// The cache is an eventlog store that holds a prefix of the stream: every
// batch it holds carries the stream sequence of its message (the log's
// replica marker). It can hold a batch the stream does not: one this daemon
// staged before the stream refused it (a deposed daemon) or before it died
// unacknowledged. Such batches are a suffix — the log fails at the first
// refusal — so checking the last batch checks them all: if the stream's
// message at the marker is that batch, the cache is a prefix of the stream.
// If not, the cache is deleted and rebuilt from the stream, which holds
// everything it needs: the events, from which the fold derives the archive
// and snapshots.

// openCache opens the cache, deleting it first if it does not match the
// stream, and sets the stream sequence it holds.
func (s *Store) openCache(ctx context.Context) error {
	opts := s.opts.Log
	opts.Replica = s
	log, err := eventlog.Open(s.opts.Dir, opts)
	if err != nil {
		return fmt.Errorf("jetstream: open the cache: %w", err)
	}
	last, ok, err := s.matches(ctx, log)
	if err != nil {
		log.Close()
		return err
	}
	if !ok {
		s.logger.Warn().Str("dir", s.opts.Dir).Uint64("seq", log.LastSeq()).
			Msg("jetstream: the cache holds a batch the stream does not (refused or never acknowledged): rebuilding it from the stream")
		if err := log.Close(); err != nil {
			return fmt.Errorf("jetstream: close the cache to rebuild it: %w", err)
		}
		fs := opts.FS
		if fs == nil {
			fs = vfs.Default
		}
		if err := fs.RemoveAll(s.opts.Dir); err != nil {
			return fmt.Errorf("jetstream: delete the cache to rebuild it: %w", err)
		}
		if log, err = eventlog.Open(s.opts.Dir, opts); err != nil {
			return fmt.Errorf("jetstream: open the cache: %w", err)
		}
		last = 0
	}
	s.log = log
	s.mu.Lock()
	s.mu.last = last
	s.mu.Unlock()
	return nil
}

// matches says whether log is a prefix of the stream, and the stream
// sequence of its last batch.
func (s *Store) matches(ctx context.Context, log *eventlog.Log) (uint64, bool, error) {
	m, err := log.ReplicaMarker()
	if err != nil {
		return 0, false, fmt.Errorf("jetstream: %w", err)
	}
	if m == nil {
		if log.LastSeq() == 0 {
			return 0, true, nil
		}
		return 0, false, fmt.Errorf("%w: %s holds %d events", ErrNotCache, s.opts.Dir, log.LastSeq())
	}
	sseq, err := parseMarker(m)
	if err != nil {
		return 0, false, fmt.Errorf("jetstream: cache %s: %w", s.opts.Dir, err)
	}
	raw, err := s.stream.GetMsg(ctx, sseq)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("jetstream: read stream seq %d: %w", sseq, err)
	}
	evs, err := decodeBatch(raw.Data)
	if err != nil {
		return 0, false, fmt.Errorf("jetstream: stream seq %d: %w", sseq, err)
	}
	if evs[len(evs)-1].Seq != log.LastSeq() {
		return 0, false, nil
	}
	for i := range evs {
		have, err := log.Get(evs[i].Seq)
		if err != nil {
			return 0, false, fmt.Errorf("jetstream: cache: %w", err)
		}
		if have.ID != evs[i].ID {
			return 0, false, nil
		}
	}
	return sseq, true, nil
}

// catchUp imports into the cache every batch the stream holds past it, each
// folded into the table rebuilt from the cache so that the archive records
// of the jobs it ends are written with it, as the service writes them; then
// a snapshot, so that the service's own rebuild folds no more than this one.
func (s *Store) catchUp(ctx context.Context) error {
	ictx, cancel := context.WithTimeout(ctx, s.attempt())
	info, err := s.stream.Info(ictx)
	cancel()
	if err != nil {
		return fmt.Errorf("jetstream: stream %s: %w", s.opts.Stream, err)
	}
	from, to := s.StreamSeq()+1, info.State.LastSeq
	purged := from < info.State.FirstSeq // below the newest checkpoint but one (checkpoint.go)
	if from > to && !purged {
		return nil
	}
	table, _, err := replay.Rebuild(s.log, s.logger)
	if err != nil {
		return fmt.Errorf("%w: %w", errCache, err)
	}
	table.SetRetire(projection.RetireRecord)
	if purged {
		// What the stream no longer holds is in the checkpoint: an empty
		// cache loads it first. A cache that holds some of it cannot take
		// it in (its events are not the checkpoint's compaction of them):
		// it is deleted and rebuilt when the daemon opens it again.
		if s.log.LastSeq() != 0 {
			return fmt.Errorf("%w: %w: it ends at stream seq %d, the stream begins at %d", errCache, ErrBehind, from-1, info.State.FirstSeq)
		}
		if err := s.restore(ctx, table); err != nil {
			return err
		}
		if from = s.StreamSeq() + 1; from < info.State.FirstSeq {
			return fmt.Errorf("%w: the checkpoint ends at stream seq %d, the stream begins at %d", errCache, from-1, info.State.FirstSeq)
		}
		if from > to {
			return s.putSnapshot(table)
		}
	}
	s.logger.Info().Uint64("from", from).Uint64("to", to).Uint64("seq", s.log.LastSeq()).
		Msg("jetstream: catching the cache up with the stream")
	// Imports are staged and waited for a fetch's worth at a time, so that
	// they share fsyncs: one each made a rebuild as slow as fsync.
	var staged imports
	err = s.pull(ctx, from, to, func(sseq uint64, data []byte) error {
		return staged.add(s, table, sseq, data)
	})
	if err := errors.Join(err, staged.wait()); err != nil {
		return err
	}
	return s.putSnapshot(table)
}

// putSnapshot writes a snapshot of table, the cache's fold.
func (s *Store) putSnapshot(table *projection.Table) error {
	if err := s.log.PutSnapshot(table.Seq(), table.Snapshot()); err != nil {
		return fmt.Errorf("%w: snapshot: %w", errCache, err)
	}
	return nil
}

// imports are the cache's imports staged and not yet waited for: waited
// for together, pullBatch at most, they share the cache's fsyncs.
type imports []*eventlog.Commit

// add folds the message at stream seq sseq into table and stages its
// import, waiting for those staged when they are pullBatch.
func (im *imports) add(s *Store, table *projection.Table, sseq uint64, data []byte) error {
	c, err := s.stageBatch(table, sseq, data)
	if err != nil {
		return fmt.Errorf("%w: %w", errCache, err)
	}
	if *im = append(*im, c); len(*im) == pullBatch {
		return im.wait()
	}
	return nil
}

// wait waits for every staged import: each, so that Close does not wait on
// one left behind.
func (im *imports) wait() error {
	var err error
	for _, c := range *im {
		err = errors.Join(err, c.Wait())
	}
	*im = (*im)[:0]
	if err != nil {
		return fmt.Errorf("%w: %w", errCache, err)
	}
	return nil
}

// stageBatch folds the message at stream seq sseq into table and stages its
// import into the cache with the archive records the fold derived; the
// Commit says when it is durable.
func (s *Store) stageBatch(table *projection.Table, sseq uint64, data []byte) (*eventlog.Commit, error) {
	if want := s.StreamSeq() + 1; sseq != want {
		return nil, fmt.Errorf("jetstream: stream seq %d where %d was expected: the stream has a hole", sseq, want)
	}
	evs, err := decodeBatch(data)
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream seq %d: %w", sseq, err)
	}
	for i := range evs {
		if err := table.Apply(&evs[i]); err != nil {
			return nil, fmt.Errorf("jetstream: stream seq %d: fold of seq %d: %w", sseq, evs[i].Seq, err)
		}
	}
	c, err := s.log.StageImport(evs, table.TakeRetired(), marker(sseq))
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream seq %d: %w", sseq, err)
	}
	s.mu.Lock()
	s.mu.last = sseq
	s.mu.Unlock()
	return c, nil
}
