package eventlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/leaselog/leaselog/event"

	"github.com/cockroachdb/pebble/v2"
)

// ErrTimeIndex is returned by CheckTimeIndex when the index differs from the
// runs of the events.
var ErrTimeIndex = errors.New("eventlog: time index differs from the events")

// CheckTimeIndex checks that the time index names exactly the runs of the
// durable events: a run key (and its clock key) for each event whose second
// differs from the one before, and nothing else. The index is a function of
// the events alone, so any difference is damage, or a batch that was not
// atomic. A store whose index queries do not use (an older store opened
// read-only) is not checked. For offline verification: it reads the whole
// log.
func (l *Log) CheckTimeIndex() error {
	if !l.timeIndexed {
		return nil
	}
	done, err := l.reading()
	if err != nil {
		return err
	}
	defer done()
	last := l.DurableSeq()
	events, err := l.db.NewIter(&pebble.IterOptions{LowerBound: eventKey(nil, 1), UpperBound: eventKey(nil, last+1)})
	if err != nil {
		return fmt.Errorf("eventlog: check the time index: %w", err)
	}
	defer events.Close()
	runs, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixRun}, UpperBound: runKey(nil, last+1)})
	if err != nil {
		return fmt.Errorf("eventlog: check the time index: %w", err)
	}
	defer runs.Close()

	var run runState
	var e event.Event
	var clock []byte
	n := 0
	indexed := runs.First()
	for ok := events.First(); ok; ok = events.Next() {
		seq, err := seqSuffix(events.Key())
		if err != nil {
			return err
		}
		v, err := events.ValueAndErr()
		if err != nil {
			return fmt.Errorf("eventlog: read seq %d: %w", seq, err)
		}
		if err := event.DecodeAliased(seq, v, &e); err != nil {
			return err
		}
		if !run.starts(e.Time) {
			continue
		}
		if !indexed {
			return fmt.Errorf("%w: seq %d starts a run of second %d; no key %q", ErrTimeIndex, seq, run.sec, runKey(nil, seq))
		}
		got, err := runSeq(runs.Key())
		if err != nil {
			return err
		}
		if got != seq {
			return fmt.Errorf("%w: key %q names a run at seq %d, the events start one at seq %d", ErrTimeIndex, runs.Key(), got, seq)
		}
		sv, err := runs.ValueAndErr()
		if err != nil {
			return fmt.Errorf("eventlog: read time index key %q: %w", runs.Key(), err)
		}
		if len(sv) != 8 || int64(binary.BigEndian.Uint64(sv)^(1<<63)) != run.sec {
			return fmt.Errorf("%w: key %q holds %x, the run's second is %d", ErrTimeIndex, runs.Key(), sv, run.sec)
		}
		clock = clockKey(clock[:0], run.sec, seq)
		if _, closer, err := l.db.Get(clock); err != nil {
			return fmt.Errorf("%w: run at seq %d: key %q: %v", ErrTimeIndex, seq, clock, err)
		} else {
			closer.Close()
		}
		n++
		indexed = runs.Next()
	}
	if err := events.Error(); err != nil {
		return fmt.Errorf("eventlog: check the time index: %w", err)
	}
	if indexed {
		return fmt.Errorf("%w: key %q names a run no event starts", ErrTimeIndex, runs.Key())
	}
	if err := runs.Error(); err != nil {
		return fmt.Errorf("eventlog: check the time index: %w", err)
	}
	// Every clock key was found above, one per run: any more is one too many.
	clocks, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixClock}, UpperBound: []byte{prefixClock + 1}})
	if err != nil {
		return fmt.Errorf("eventlog: check the time index: %w", err)
	}
	defer clocks.Close()
	for ok := clocks.First(); ok; ok = clocks.Next() {
		seq, err := seqSuffix(clocks.Key())
		if err != nil {
			return err
		}
		if seq > last {
			continue
		}
		if n--; n < 0 {
			return fmt.Errorf("%w: key %q names a run no event starts", ErrTimeIndex, clocks.Key())
		}
	}
	return clocks.Error()
}
