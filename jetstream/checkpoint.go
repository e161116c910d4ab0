package jetstream

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/projection"
)

// The stream would keep every batch for ever: the heartbeats the caches
// compact, and the rest. So the active daemon checkpoints (docs/cluster.md
// §8): it writes its cache's log as it is — compacted, with the runs of
// seqs compactions removed, up to a batch the stream acknowledged — as one
// object of the bucket <stream>_CHECKPOINT (NATS's object store: chunked,
// replicated as the stream is, checked by its digest), then purges the
// stream below the checkpoint before it. What a purge removed is in the
// newest checkpoint, and what a checkpoint holds is in the stream from the
// checkpoint before it on: a cache behind the newest one, whose next batch
// a purge removed, is rebuilt from it (catchUp), a standby's included. The
// object replaces its last version: the bucket holds one checkpoint, about
// the size of a compacted cache, which grows with jobs.
//
// An object is:
//
//	"leaselog-checkpoint\x01" ‖ uvarint(marker) ‖ uvarint(last seq) ‖ uvarint(cursor)
//	( 'g' ‖ uvarint(first) ‖ uvarint(last)        seqs compacted before the next event
//	| 'e' ‖ uvarint(seq) ‖ uvarint(len) ‖ record  an event )*
//	'z' ‖ uvarint(events) ‖ uvarint(runs)        the end, and what came before it

// ErrPurgeDenied is returned by Checkpoint, the checkpoint written, when the
// stream refuses purges: one created by a build before checkpoints, with
// DenyPurge, which NATS does not let a stream drop. It keeps every batch.
var ErrPurgeDenied = errors.New("jetstream: the stream denies purges (created by an older leaselog): it keeps every batch")

// ErrBehind is returned when a cache holds events the stream no longer
// does, and not all of those after them: a purge passed it (a standby that
// lagged a checkpoint interval behind). Opened again, the cache is rebuilt
// from the checkpoint.
var ErrBehind = errors.New("jetstream: the stream was purged past this cache (it lagged a checkpoint behind): restart the daemon to rebuild it from the checkpoint")

const (
	checkpointObject = "log"
	checkpointMagic  = "leaselog-checkpoint\x01"
)

// CheckpointStats says what a checkpoint wrote and purged.
type CheckpointStats struct {
	Marker uint64 // the stream seq of the last batch it holds
	Last   uint64 // the seq of its last event
	Events int    // events in it
	Bytes  uint64 // its size
	Purged uint64 // the stream's messages below this one were purged; 0: none
}

// checkpoints returns the bucket of the checkpoints, created if need be.
func (s *Store) checkpoints(ctx context.Context) (natsjs.ObjectStore, error) {
	name := s.opts.Stream + "_CHECKPOINT"
	obs, err := s.js.ObjectStore(ctx, name)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		obs, err = s.js.CreateObjectStore(ctx, natsjs.ObjectStoreConfig{
			Bucket: name, Description: "leaselog: the compacted log of stream " + s.opts.Stream + " up to a batch, below which the stream is purged",
			Replicas: s.opts.Replicas, Storage: natsjs.FileStorage,
		})
		if errors.Is(err, natsjs.ErrBucketExists) {
			obs, err = s.js.ObjectStore(ctx, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: checkpoint bucket %s: %w", name, err)
	}
	return obs, nil
}

// Checkpoint writes the active daemon's cache, as it is, as the checkpoint,
// then purges the stream below the checkpoint it replaced: a checkpoint
// interval of batches stays in the stream for a standby to tail. It does
// nothing if nothing was appended since the last. Only the active daemon
// checkpoints (errNotActive otherwise).
func (s *Store) Checkpoint(ctx context.Context) (CheckpointStats, error) {
	var st CheckpointStats
	s.mu.Lock()
	active := s.mu.publishing
	s.mu.Unlock()
	if !active {
		return st, errNotActive
	}
	c, err := s.log.Image(ctx)
	if err != nil {
		return st, fmt.Errorf("jetstream: checkpoint: %w", err)
	}
	defer c.Close()
	if c.Marker == nil {
		return st, nil // nothing appended yet
	}
	if st.Marker, err = parseMarker(c.Marker); err != nil {
		return st, fmt.Errorf("jetstream: checkpoint: %w", err)
	}
	st.Last = c.Last
	obs, err := s.checkpoints(ctx)
	if err != nil {
		return st, err
	}
	prev, err := checkpointMarker(ctx, obs)
	if err != nil {
		return st, err
	}
	if prev >= st.Marker {
		return st, nil
	}
	r, w := io.Pipe()
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		w.CloseWithError(writeCheckpoint(w, c, st.Marker, &st))
	}()
	info, err := obs.Put(ctx, natsjs.ObjectMeta{Name: checkpointObject,
		Description: fmt.Sprintf("the log up to seq %d, stream seq %d", st.Last, st.Marker),
		Metadata:    map[string]string{"marker": strconv.FormatUint(st.Marker, 10), "last": strconv.FormatUint(st.Last, 10)}}, r)
	r.Close() // a write still in progress fails: the writer returns
	<-wrote   // before c is closed, and st read
	if err != nil {
		return st, fmt.Errorf("jetstream: write the checkpoint at stream seq %d: %w", st.Marker, err)
	}
	st.Bytes = info.Size
	s.logger.Info().Uint64("stream_seq", st.Marker).Uint64("seq", st.Last).Int("events", st.Events).Uint64("bytes", st.Bytes).
		Msg("jetstream: checkpoint written")
	if prev == 0 {
		return st, nil
	}
	if s.stream.CachedInfo().Config.DenyPurge {
		return st, ErrPurgeDenied
	}
	if err := s.stream.Purge(ctx, natsjs.WithPurgeSequence(prev+1)); err != nil {
		return st, fmt.Errorf("jetstream: purge the stream below stream seq %d: %w", prev+1, err)
	}
	st.Purged = prev + 1
	s.logger.Info().Uint64("below", st.Purged).Msg("jetstream: stream purged below the last checkpoint but one")
	return st, nil
}

// checkpointMarker is the stream seq the bucket's checkpoint holds up to; 0
// if it holds none.
func checkpointMarker(ctx context.Context, obs natsjs.ObjectStore) (uint64, error) {
	info, err := obs.GetInfo(ctx, checkpointObject)
	if errors.Is(err, natsjs.ErrObjectNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("jetstream: read the checkpoint: %w", err)
	}
	m, err := strconv.ParseUint(info.Metadata["marker"], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: checkpoint %s: marker %q", event.ErrCorrupt, info.NUID, info.Metadata["marker"])
	}
	return m, nil
}

// writeCheckpoint writes c to w, counting what it wrote in st.
func writeCheckpoint(w io.Writer, c *eventlog.Image, marker uint64, st *CheckpointStats) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	b := []byte(checkpointMagic)
	b = binary.AppendUvarint(b, marker)
	b = binary.AppendUvarint(b, c.Last)
	b = binary.AppendUvarint(b, c.Compacted)
	runs := 0
	var rec []byte
	err := c.Events(func(e *event.Event, gap eventlog.Compacted, ok bool) error {
		if ok {
			b = append(b, 'g')
			b = binary.AppendUvarint(b, gap.First)
			b = binary.AppendUvarint(b, gap.Last)
			runs++
		}
		rec = event.AppendRecord(rec[:0], e)
		b = append(b, 'e')
		b = binary.AppendUvarint(b, e.Seq)
		b = binary.AppendUvarint(b, uint64(len(rec)))
		b = append(b, rec...)
		st.Events++
		if len(b) >= 64<<10 {
			if _, err := bw.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
		return nil
	})
	if err != nil {
		return err
	}
	b = append(b, 'z')
	b = binary.AppendUvarint(b, uint64(st.Events))
	b = binary.AppendUvarint(b, uint64(runs))
	if _, err := bw.Write(b); err != nil {
		return err
	}
	return bw.Flush()
}

// restore loads the bucket's checkpoint into the cache, which is empty,
// folding it into table so that the archive records of the jobs it ends
// go with it, as an import's do; then the cache holds the stream up to the
// checkpoint's marker.
func (s *Store) restore(ctx context.Context, table *projection.Table) error {
	obs, err := s.checkpoints(ctx)
	if err != nil {
		return err
	}
	res, err := obs.Get(ctx, checkpointObject)
	if err != nil {
		return fmt.Errorf("jetstream: read the checkpoint: %w", err)
	}
	defer res.Close()
	r := bufio.NewReaderSize(res, 1<<20)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: checkpoint: %s", event.ErrCorrupt, fmt.Sprintf(format, args...))
	}
	magic := make([]byte, len(checkpointMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != checkpointMagic {
		return bad("no checkpoint header (%v)", err)
	}
	var head [3]uint64
	for i := range head {
		if head[i], err = binary.ReadUvarint(r); err != nil {
			return bad("header: %v", err)
		}
	}
	mark, last, cursor := head[0], head[1], head[2]
	var staged []*eventlog.Commit
	wait := func() error {
		var err error
		for _, c := range staged {
			err = errors.Join(err, c.Wait())
		}
		staged = staged[:0]
		return err
	}
	var evs []event.Event
	var gaps []eventlog.Compacted
	flush := func() error {
		if len(evs) == 0 {
			return nil
		}
		for i, gi := 0, 0; i < len(evs); i++ {
			for ; gi < len(gaps) && gaps[gi].First < evs[i].Seq; gi++ {
				if err := table.Skip(gaps[gi].First, gaps[gi].Last); err != nil {
					return fmt.Errorf("%w: checkpoint: %w", errCache, err)
				}
			}
			if err := table.Apply(&evs[i]); err != nil {
				return fmt.Errorf("%w: checkpoint: fold of seq %d: %w", errCache, evs[i].Seq, err)
			}
		}
		c, err := s.log.StageImportCompacted(evs, gaps, table.TakeRetired(), marker(mark))
		if err != nil {
			return fmt.Errorf("%w: checkpoint: %w", errCache, err)
		}
		if staged = append(staged, c); len(staged) == pullBatch {
			if err := wait(); err != nil {
				return fmt.Errorf("%w: checkpoint: %w", errCache, err)
			}
		}
		evs, gaps = evs[:0], gaps[:0]
		return nil
	}
	var events, runs uint64
	for {
		kind, err := r.ReadByte()
		if err != nil {
			return errors.Join(bad("cut short after %d events: %v", events, err), wait())
		}
		switch kind {
		case 'g':
			var g eventlog.Compacted
			if g.First, err = binary.ReadUvarint(r); err == nil {
				g.Last, err = binary.ReadUvarint(r)
			}
			if err != nil {
				return errors.Join(bad("compacted seqs after %d events: %v", events, err), wait())
			}
			gaps = append(gaps, g)
			runs++
		case 'e':
			seq, err := binary.ReadUvarint(r)
			var n uint64
			if err == nil {
				n, err = binary.ReadUvarint(r)
			}
			if err != nil || n > 1<<24 {
				return errors.Join(bad("event after %d events: %v", events, err), wait())
			}
			rec := make([]byte, n)
			if _, err := io.ReadFull(r, rec); err != nil {
				return errors.Join(bad("event seq %d: %v", seq, err), wait())
			}
			e, err := event.Decode(seq, rec)
			if err != nil {
				return errors.Join(fmt.Errorf("jetstream: checkpoint: %w", err), wait())
			}
			evs = append(evs, e)
			events++
			if len(evs) == pullBatch {
				if err := flush(); err != nil {
					return errors.Join(err, wait())
				}
			}
		case 'z':
			var n, g uint64
			if n, err = binary.ReadUvarint(r); err == nil {
				g, err = binary.ReadUvarint(r)
			}
			if err != nil || n != events || g != runs {
				return errors.Join(bad("it ends saying %d events and %d runs, it holds %d and %d", n, g, events, runs), wait())
			}
			if err := errors.Join(flush(), wait()); err != nil {
				return err
			}
			if s.log.LastSeq() != last {
				return bad("it ends at seq %d, its header says %d", s.log.LastSeq(), last)
			}
			if err := s.log.SetCompacted(cursor); err != nil {
				return fmt.Errorf("%w: %w", errCache, err)
			}
			s.mu.Lock()
			s.mu.last = mark
			s.mu.Unlock()
			s.logger.Info().Uint64("stream_seq", mark).Uint64("seq", last).Uint64("events", events).
				Msg("jetstream: the cache loaded from the checkpoint")
			return nil
		default:
			return errors.Join(bad("entry %q after %d events", kind, events), wait())
		}
	}
}

// checkpointEvery is how often RunCheckpoints looks at the stream.
const checkpointEvery = time.Minute

// RunCheckpoints checkpoints until ctx ends, while this daemon is the active
// one: whenever the stream holds at least Options.CheckpointBytes, and at
// least as much as the last checkpoint, so that the stream and its
// checkpoint stay within a few times the compacted log while each batch is
// written into a checkpoint about once. It looks every minute, or as tick
// says (nil: every minute; a test sends its own). A checkpoint that fails
// is logged and tried again at the next look; a stream that denies purges
// is said once.
func (s *Store) RunCheckpoints(ctx context.Context, tick <-chan time.Time) error {
	if tick == nil {
		t := time.NewTicker(checkpointEvery)
		defer t.Stop()
		tick = t.C
	}
	denied := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		}
		due, err := s.checkpointDue(ctx)
		if err != nil || !due {
			continue
		}
		_, err = s.Checkpoint(ctx)
		switch {
		case errors.Is(err, ErrPurgeDenied):
			if !denied {
				s.logger.Warn().Err(err).Msg("jetstream: checkpoints are written, but the stream keeps every batch; to compact it, move the log to a new stream")
			}
			denied = true
		case errors.Is(err, errNotActive), ctx.Err() != nil:
		case err != nil:
			s.logger.Error().Err(err).Msg("jetstream: checkpoint failed; trying again later")
		}
	}
}

// checkpointDue says whether the stream holds enough for a checkpoint.
func (s *Store) checkpointDue(ctx context.Context) (bool, error) {
	ictx, cancel := context.WithTimeout(ctx, s.attempt())
	defer cancel()
	info, err := s.stream.Info(ictx)
	if err != nil {
		return false, err
	}
	if info.State.Bytes < s.opts.CheckpointBytes {
		return false, nil
	}
	obs, err := s.checkpoints(ictx)
	if err != nil {
		return false, err
	}
	last, err := obs.GetInfo(ictx, checkpointObject)
	if errors.Is(err, natsjs.ErrObjectNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return info.State.Bytes >= last.Size, nil
}
