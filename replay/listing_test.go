package replay

import (
	"fmt"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/projection"
)

// RebuildListing is Rebuild as it found its snapshot before: the snapshots
// listed, then each read by its key, newest first. BenchmarkRebuild runs it
// beside Rebuild.
func RebuildListing(log Log, logger zerolog.Logger) (*projection.Table, Stats, error) {
	var st Stats
	seqs, err := log.Snapshots()
	if err != nil {
		return nil, st, fmt.Errorf("replay: list snapshots: %w", err)
	}
	t := projection.New()
	for _, seq := range seqs {
		if seq > log.DurableSeq() {
			st.Skipped = append(st.Skipped, seq)
			continue
		}
		restored, err := restore(log, seq)
		if err != nil {
			st.Skipped = append(st.Skipped, seq)
			continue
		}
		t, st.SnapshotSeq = restored, seq
		break
	}
	t.SetRetire(projection.RetireDrop)
	n, err := fold(t, log.Query(eventlog.Query{After: t.Seq(), ReadAhead: true}), nil)
	st.Events = n
	return t, st, err
}
