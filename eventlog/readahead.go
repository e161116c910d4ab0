package eventlog

import (
	"fmt"
	"github.com/leaselog/leaselog/event"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// readAhead walks a Pebble iterator over event keys on its own goroutine and
// hands the records over in chunks, so that a long scan uses two cores: one
// reads and copies, the other decodes and folds. Chunks are recycled; once
// they have grown to size, a steady scan allocates nothing.
type readAhead struct {
	full chan *chunk
	free chan *chunk
	done chan struct{}
	wg   sync.WaitGroup
	err  error // set by the reader before it closes full

	cur *chunk
	pos int
}

type chunk struct {
	seqs []uint64
	ends []int // record i is buf[ends[i-1]:ends[i]]
	buf  []byte
}

const (
	chunkRecords = 1024
	chunkBytes   = 256 << 10
	chunksAhead  = 4
)

func startReadAhead(src *pebble.Iterator) *readAhead {
	ra := &readAhead{
		full: make(chan *chunk, chunksAhead),
		free: make(chan *chunk, chunksAhead+2),
		done: make(chan struct{}),
	}
	for i := 0; i < chunksAhead+2; i++ {
		// Chunks grow as they fill, so that a short scan (most restarts, and
		// every query of a small log) does not pay for 1.5 MB of buffers; a
		// long one allocates them once and recycles them.
		ra.free <- &chunk{}
	}
	ra.wg.Add(1)
	go ra.read(src)
	return ra
}

// read is the reader goroutine: the only user of src until it returns.
func (ra *readAhead) read(src *pebble.Iterator) {
	defer ra.wg.Done()
	defer close(ra.full)
	var c *chunk
	send := func() bool {
		select {
		case ra.full <- c:
			c = nil
			return true
		case <-ra.done:
			return false
		}
	}
	for ok := src.First(); ok; ok = src.Next() {
		if c == nil {
			select {
			case c = <-ra.free:
			case <-ra.done:
				return
			}
			c.seqs, c.ends, c.buf = c.seqs[:0], c.ends[:0], c.buf[:0]
		}
		seq, err := seqSuffix(src.Key())
		if err != nil {
			ra.err = err
			return
		}
		v, err := src.ValueAndErr()
		if err != nil {
			ra.err = fmt.Errorf("read seq %d: %w", seq, err)
			return
		}
		c.seqs = append(c.seqs, seq)
		c.buf = append(c.buf, v...)
		c.ends = append(c.ends, len(c.buf))
		if len(c.seqs) == chunkRecords || len(c.buf) >= chunkBytes {
			if !send() {
				return
			}
		}
	}
	if err := src.Error(); err != nil {
		ra.err = err
	}
	if c != nil && len(c.seqs) > 0 {
		send()
	}
}

// nextAhead is Next for a read-ahead scan.
func (it *Iter) nextAhead() bool {
	ra := it.ahead
	for {
		if ra.cur != nil && ra.pos < len(ra.cur.seqs) {
			start := 0
			if ra.pos > 0 {
				start = ra.cur.ends[ra.pos-1]
			}
			seq, rec := ra.cur.seqs[ra.pos], ra.cur.buf[start:ra.cur.ends[ra.pos]]
			ra.pos++
			if !it.follows(seq) {
				return false
			}
			if err := event.DecodeAliased(seq, rec, &it.ev); err != nil {
				it.err = err
				return false
			}
			if it.matches() {
				it.seen++
				return true
			}
			continue
		}
		if ra.cur != nil {
			ra.free <- ra.cur // the event handed out last aliased it: Next has moved on
			ra.cur = nil
		}
		c, ok := <-ra.full
		if !ok {
			if ra.err != nil {
				it.err = it.readErr(ra.err)
			}
			return false
		}
		ra.cur, ra.pos = c, 0
	}
}

// stop ends the reader and waits for it, so that the caller may close the
// Pebble iterator.
func (ra *readAhead) stop() {
	close(ra.done)
	ra.wg.Wait()
}
