package replay

import (
	"errors"
	"fmt"

	"github.com/leaselog/leaselog/event"
)

// ErrCompaction is returned by Verify when the seqs missing from the log, the
// runs of compacted seqs the log recorded, and what the lease.heartbeats
// summaries claim to stand for do not agree.
var ErrCompaction = errors.New("replay: compacted seqs differ from the summaries")

// compacted is what Verify adds up of a compacted log: the gaps it met (each
// one a run the log recorded, or the scan would have failed naming it), and
// the summaries of heartbeats that claim them. Every gap is one summary's
// heartbeats, but its last: their numbers and their claims (event.ClaimOf,
// summed) must be the same, and so must those of the runs recorded, so that
// a run naming seqs still there, or a summary claiming seqs it does not,
// fails.
type compacted struct {
	gaps, gapClaim   uint64 // seqs missing, and their claims summed
	summaries, beats uint64 // lease.heartbeats events, and the heartbeats they stand for
	claimed, claim   uint64 // seqs the summaries claim (beats less one each), and their Claims summed
}

func (c *compacted) gap(first, last uint64) {
	c.gaps += last - first + 1
	for s := first; s <= last; s++ {
		c.gapClaim += event.ClaimOf(s)
	}
}

func (c *compacted) event(e *event.Event) {
	if e.Type != event.TypeHeartbeats {
		return
	}
	c.summaries++
	c.beats += e.Beats.Count
	c.claimed += e.Beats.Count - 1 // the fold refused a count under 2
	c.claim += e.Beats.Claim
}

// check holds the gaps to the summaries and to the runs the log recorded.
func (c *compacted) check(log Checked) error {
	var runs, recorded uint64
	err := log.ScanCompacted(func(first, last uint64) error {
		runs++
		recorded += last - first + 1
		return nil
	})
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	switch {
	case recorded != c.gaps:
		return fmt.Errorf("%w: %d runs of compacted seqs name %d seqs, the log misses %d", ErrCompaction, runs, recorded, c.gaps)
	case c.claimed != c.gaps:
		return fmt.Errorf("%w: %d summaries claim %d seqs, the log misses %d", ErrCompaction, c.summaries, c.claimed, c.gaps)
	case c.claim != c.gapClaim:
		return fmt.Errorf("%w: the %d seqs the log misses are not those its %d summaries claim (claims %016x, gaps %016x)",
			ErrCompaction, c.gaps, c.summaries, c.claim, c.gapClaim)
	}
	return nil
}
