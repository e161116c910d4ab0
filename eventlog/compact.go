package eventlog

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/leaselog/leaselog/event"
)

// Compaction keeps a log's size to its jobs and their decisions, not to
// heartbeats × time. The heartbeats of a job that ended can change nothing
// any more: CompactJob folds each run of them on one lease into its last, a
// lease.heartbeats event (event.Beats: how many, the first seq and time,
// the claim) written in place, at the last one's seq, with its time, id,
// job, lease and worker. The others are deleted with their index entries.
// Folded, the summary is that last heartbeat, so the table of the compacted
// log is the table of the log before, at every seq from the summary's on.
//
// No seq moves and none is reused: a compaction leaves gaps, which it
// records, in the same batch, as runs of consecutive removed seqs (gaps.go:
// merged with the runs beside them, each under its first seq and its last).
// Every read a compaction makes is a point read: a seek would step over the
// tombstones of every heartbeat compacted before, until Pebble's
// compactions drop them. A scan of the log checks every gap it meets
// against these runs (iter.go),
// and a verifier holds the runs to the summaries (their Claims add up to the
// event.ClaimOf of every gap), so that a seq missing that no compaction
// removed is still corruption named by its seq.
//
// The batch keeps the rest of the store true to what is left: the time index
// names the runs of the events that remain (a run's first event deleted, the
// next one left starts it, if it starts one at all now), and a snapshot
// taken between the first heartbeat of a summary and its last is deleted, since
// the compacted log no longer folds to it (the newest snapshot is after the
// job's end, and those before the summary still hold). The first compaction
// of a store also sets its format to 3, which an older build refuses.
//
// One batch per summary, each with at most Options.SegmentHeartbeats
// heartbeats (a lease with more gets a summary per so many), so that a
// compaction never holds Pebble's commit pipeline for long; a crash between
// two of them leaves what is done done, and CompactJob done again finds the
// rest. The batches are not events: they take no seq, and enter the WAL
// beside the appends, under the log's mutex only to be applied, each synced
// (writeSynced, whose fsync concurrent appends share): a reader never sees
// a compaction that a crash could take back.

// DefaultSegmentHeartbeats is the most heartbeats one summary stands for,
// unless Options.SegmentHeartbeats says otherwise: about 11 hours of a
// lease renewed every 10 s, a batch of a few hundred kilobytes.
const DefaultSegmentHeartbeats = 4096

// CompactStats says what a compaction did.
type CompactStats struct {
	Summaries  int   // lease.heartbeats events written
	Heartbeats int   // heartbeat events removed
	Bytes      int64 // bytes of keys and values removed, less the summaries written
	Snapshots  int   // snapshots removed: a summary's span held them
}

// Add adds o to s.
func (s *CompactStats) Add(o CompactStats) {
	s.Summaries += o.Summaries
	s.Heartbeats += o.Heartbeats
	s.Bytes += o.Bytes
	s.Snapshots += o.Snapshots
}

// beat is a heartbeat a compaction found.
type beat struct {
	seq  uint64
	time int64
	id   [16]byte
	size int // bytes of its record
}

// segment is a run of heartbeats of one lease that one summary will stand for.
type segment struct {
	job, worker string
	lease       uint64
	beats       []beat
	// details is the latest details among the beats: the summary keeps
	// them, so that the history still tells the lease's last progress.
	details []byte
}

// CompactJob compacts the heartbeats of job's leases that come before seq
// end, the event that ended the job: each run of a lease's heartbeats (at
// most Options.SegmentHeartbeats of them, and none already summarised)
// becomes one lease.heartbeats event. It is for jobs that ended: what a
// live lease still needs of its heartbeats is its last, but a reader of the
// live log may be on its way through the others. Done again, it finds
// nothing more to do. The caller (the lease service's compactor) chooses
// the jobs and when; only one CompactJob runs at a time.
func (l *Log) CompactJob(job string, end uint64) (CompactStats, error) {
	var st CompactStats
	if l.opts.ReadOnly {
		return st, errors.New("eventlog: compaction of a store opened read-only")
	}
	done, err := l.reading()
	if err != nil {
		return st, err
	}
	defer done()
	l.compactMu.Lock()
	defer l.compactMu.Unlock()
	if err := l.Err(); err != nil {
		return st, err
	}
	snaps, err := l.Snapshots()
	if err != nil {
		return st, err
	}
	job = strings.Clone(job) // the caller's may alias an iterator of its own
	max := l.opts.SegmentHeartbeats
	if max <= 0 {
		max = DefaultSegmentHeartbeats
	}
	var seg segment
	flush := func() error {
		if len(seg.beats) >= 2 {
			s, err := l.compactSegment(&seg, snaps)
			if err != nil {
				return err
			}
			st.Add(s)
		}
		seg.beats, seg.details = seg.beats[:0], nil
		return nil
	}
	it := l.Query(Query{Job: job})
	for it.Next() {
		e := it.Event()
		if e.Seq >= end {
			break
		}
		switch e.Type {
		case event.TypeHeartbeat:
			if e.Lease != seg.lease {
				if err := flush(); err != nil {
					it.Close()
					return st, err
				}
				seg.job, seg.worker, seg.lease = job, strings.Clone(e.Worker), e.Lease // e aliases the iterator
			}
			seg.beats = append(seg.beats, beat{seq: e.Seq, time: e.Time, id: e.ID, size: recordSize(e)})
			if len(e.Details) != 0 {
				seg.details = append(seg.details[:0], e.Details...) // e aliases the iterator
			}
			if len(seg.beats) == max {
				if err := flush(); err != nil {
					it.Close()
					return st, err
				}
			}
		case event.TypeHeartbeats:
			// Summarised already: what came before it is done, and the
			// next heartbeats of its lease (a crash cut the job's
			// compaction short) make a summary of their own.
			if err := flush(); err != nil {
				it.Close()
				return st, err
			}
		}
	}
	if err := it.Close(); err != nil {
		return st, fmt.Errorf("eventlog: compact job %q: %w", job, err)
	}
	if err := flush(); err != nil {
		return st, err
	}
	return st, nil
}

// recordSize is the size of e's record in the log.
func recordSize(e *event.Event) int { return len(event.AppendRecord(nil, e)) }

// compactSegment writes the batch that folds seg into its last heartbeat.
func (l *Log) compactSegment(seg *segment, snaps []uint64) (CompactStats, error) {
	beats := seg.beats
	last := beats[len(beats)-1]
	gone := beats[:len(beats)-1]
	st := CompactStats{Summaries: 1, Heartbeats: len(gone)}
	what := fmt.Sprintf("compaction of lease %d, seqs %d..%d", seg.lease, beats[0].seq, last.seq)
	b := l.db.NewBatch()
	fail := func(err error) (CompactStats, error) {
		b.Close()
		return CompactStats{}, fmt.Errorf("eventlog: %s: %w", what, err)
	}
	sum := event.Event{Seq: last.seq, ID: last.id, Type: event.TypeHeartbeats, Time: last.time,
		Job: seg.job, Lease: seg.lease, Worker: seg.worker, Details: seg.details,
		Beats: event.Beats{Count: uint64(len(beats)), FirstSeq: beats[0].seq, FirstTime: beats[0].time}}
	var s []byte
	del := func(key []byte, size int) error {
		st.Bytes += int64(len(key) + size)
		return b.Delete(key, nil)
	}
	for _, x := range gone {
		sum.Beats.Claim += event.ClaimOf(x.seq)
		err := errors.Join(
			del(eventKey(s[:0], x.seq), x.size),
			del(typeIndexKey(s[:0], event.TypeHeartbeat, x.seq), 0),
			del(stringIndexKey(s[:0], prefixJob, seg.job, x.seq), 0),
			del(stringIndexKey(s[:0], prefixWorker, seg.worker, x.seq), 0))
		if err != nil {
			return fail(err)
		}
	}
	rec := event.AppendRecord(nil, &sum)
	st.Bytes -= int64(len(rec) - last.size)
	err := errors.Join(
		b.Set(eventKey(nil, last.seq), rec, nil),
		b.Delete(typeIndexKey(nil, event.TypeHeartbeat, last.seq), nil),
		b.Set(typeIndexKey(nil, event.TypeHeartbeats, last.seq), nil, nil))
	if err != nil {
		return fail(err)
	}
	seqs := make([]uint64, len(gone))
	for i, x := range gone {
		seqs[i] = x.seq
	}
	pr, err := l.newProbes()
	if err != nil {
		return fail(err)
	}
	err = errors.Join(l.rerun(b, pr, gone), addGaps(b, pr, seqs))
	pr.close()
	if err != nil {
		return fail(err)
	}
	var dropped []uint64
	for _, snap := range snaps {
		if snap >= beats[0].seq && snap < last.seq {
			if err := b.Delete(snapshotKey(nil, snap), nil); err != nil {
				return fail(err)
			}
			dropped = append(dropped, snap)
			st.Snapshots++
		}
	}
	if l.format.Load() < compactedFormat {
		// Before the batch: a scan begun once it is in checks its gaps.
		l.format.Store(compactedFormat)
		if err := b.Set(metaFormatKey, []byte{compactedFormat}, nil); err != nil {
			return fail(err)
		}
	}
	if err := l.writeSynced(b, what); err != nil {
		l.snaps.forget()
		return CompactStats{}, err
	}
	l.snaps.update(0, dropped)
	if l.compacted != nil {
		l.compacted()
	}
	return st, nil
}

// rerun writes into b what the time index needs once the heartbeats gone
// are deleted: it names the runs of the events that remain (timeindex.go).
// A deleted event that started a run loses its keys; the event left after a
// stretch of deleted ones starts a run exactly when its second differs from
// that of the event left before the stretch. No other event's standing
// changes. The events around are read as they are before b (pr): a
// compaction runs alone, and the events it reads are older than any being
// appended.
func (l *Log) rerun(b *pebble.Batch, pr *probes, gone []beat) error {
	if !l.timeIndexed || len(gone) == 0 {
		return nil
	}
	isGone := func(seq uint64) bool {
		_, found := slices.BinarySearchFunc(gone, seq, func(x beat, s uint64) int { return cmp.Compare(x.seq, s) })
		return found
	}
	var s []byte
	for i := 0; i < len(gone); {
		// The stretch of deleted events from gone[i] on, up to the next
		// event left (n), and the event left before it (p).
		n, nsec, nok, err := pr.neighbour(gone[i].seq+1, +1, isGone)
		if err != nil {
			return err
		}
		j := i
		for j+1 < len(gone) && (!nok || gone[j+1].seq < n) {
			j++
		}
		_, psec, pok, err := pr.neighbour(gone[i].seq-1, -1, isGone)
		if err != nil {
			return err
		}
		for _, x := range gone[i : j+1] {
			_, had, err := pr.get(pr.runs, runKey(s[:0], x.seq))
			if err != nil {
				return err
			}
			if had {
				if err := errors.Join(b.Delete(runKey(s[:0], x.seq), nil),
					b.Delete(clockKey(s[:0], secondOf(x.time), x.seq), nil)); err != nil {
					return err
				}
			}
		}
		if nok {
			_, had, err := pr.get(pr.runs, runKey(s[:0], n))
			if err != nil {
				return err
			}
			switch want := !pok || psec != nsec; {
			case want && !had:
				if s, err = addRun(b, s, nsec, n); err != nil {
					return err
				}
			case had && !want:
				if err := errors.Join(b.Delete(runKey(s[:0], n), nil), b.Delete(clockKey(s[:0], nsec, n), nil)); err != nil {
					return err
				}
			}
		}
		i = j + 1
	}
	return nil
}

// probes read single keys for one compaction batch, as the store is before
// it, each through an iterator of its keyspace bounded to the key: reused,
// an iterator keeps the blocks it read (a compaction reads keys near each
// other), and bounded, it never steps over the tombstones of what was
// compacted before, as a seek would until Pebble's compactions drop them.
type probes struct {
	events, runs, gaps, ends *pebble.Iterator
	upper                    []byte
	// found are the events neighbour found there: no run of compacted
	// seqs starts or ends at them.
	found map[uint64]bool
}

func (l *Log) newProbes() (*probes, error) {
	pr := &probes{found: map[uint64]bool{}}
	var err error
	for _, x := range []struct {
		it     **pebble.Iterator
		prefix byte
	}{{&pr.events, prefixEvent}, {&pr.runs, prefixRun}, {&pr.gaps, prefixGap}, {&pr.ends, prefixGapEnd}} {
		if *x.it, err = l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{x.prefix}, UpperBound: []byte{x.prefix + 1}}); err != nil {
			pr.close()
			return nil, err
		}
	}
	return pr, nil
}

func (pr *probes) close() {
	for _, it := range []*pebble.Iterator{pr.events, pr.runs, pr.gaps, pr.ends} {
		if it != nil {
			it.Close()
		}
	}
}

// get returns the value of key through it, valid until its next use, if
// the key is there.
func (pr *probes) get(it *pebble.Iterator, key []byte) ([]byte, bool, error) {
	pr.upper = append(append(pr.upper[:0], key...), 0) // the iterator copies its bounds
	it.SetBounds(key, pr.upper)
	if !it.First() {
		if err := it.Error(); err != nil {
			return nil, false, fmt.Errorf("read key %q: %w", key, err)
		}
		return nil, false, nil
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return nil, false, fmt.Errorf("read key %q: %w", key, err)
	}
	return v, true, nil
}

// gap returns the run of compacted seqs that starts at seq, or with byEnd
// the one that ends at it, if there is one.
func (pr *probes) gap(seq uint64, byEnd bool) (gapRun, bool, error) {
	if byEnd {
		return gapOf(seq, true, func(key []byte) ([]byte, bool, error) { return pr.get(pr.ends, key) })
	}
	return gapOf(seq, false, func(key []byte) ([]byte, bool, error) { return pr.get(pr.gaps, key) })
}

// neighbour finds the first event from seq on, in direction dir (+1 or -1),
// that is neither gone (in the batch being written) nor compacted already,
// and returns its seq and second; ok is false past either end of the log.
func (pr *probes) neighbour(seq uint64, dir int, gone func(uint64) bool) (uint64, int64, bool, error) {
	for seq != 0 {
		if gone(seq) {
			seq = uint64(int64(seq) + int64(dir))
			continue
		}
		v, ok, err := pr.get(pr.events, eventKey(nil, seq))
		if err != nil {
			return 0, 0, false, err
		}
		if ok {
			var e event.Event
			if err := event.DecodeAliased(seq, v, &e); err != nil {
				return 0, 0, false, err
			}
			pr.found[seq] = true
			return seq, secondOf(e.Time), true, nil
		}
		// Not there: compacted already, or past the log's end (or lost,
		// which a scan names).
		g, ok, err := pr.gap(seq, dir < 0)
		if err != nil || !ok {
			return 0, 0, false, err
		}
		if dir > 0 {
			seq = g.last + 1
		} else {
			seq = g.first - 1
		}
	}
	return 0, 0, false, nil
}

// Compacted returns the compaction's cursor, 0 if none was set.
func (l *Log) Compacted() (uint64, error) {
	done, err := l.reading()
	if err != nil {
		return 0, err
	}
	defer done()
	v, closer, err := l.db.Get(metaCompactedKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("eventlog: read key %q: %w", metaCompactedKey, err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: key %q holds %d bytes, want 8", ErrCorrupt, metaCompactedKey, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// SetCompacted durably sets the compaction's cursor to seq: its driver's
// word that every job that ended at or before seq is compacted as far as it
// is to be, so that its next pass starts after it.
func (l *Log) SetCompacted(seq uint64) error {
	if l.opts.ReadOnly {
		return errors.New("eventlog: compaction cursor write to a store opened read-only")
	}
	b := l.db.NewBatch()
	if err := b.Set(metaCompactedKey, binary.BigEndian.AppendUint64(nil, seq), nil); err != nil {
		b.Close()
		return err
	}
	return l.writeSynced(b, fmt.Sprintf("compaction cursor at seq %d", seq))
}
