package sim

import (
	"fmt"
	"strings"
	"testing"
)

// TestCompactionChangesNothing: a random compaction point never changes what
// any client observes. Each seed runs twice, its daemon compacting at the
// sweeps its draws pick and not at all; the two runs take the same steps
// (their traces, the compactions' own lines aside, are the same) and their
// clients the same answers at the same times (the histories porcupine
// checks are the same), which are linearizable.
func TestCompactionChangesNothing(t *testing.T) {
	compacted := 0
	for seed := uint64(1); seed <= 24; seed++ {
		with := Run(Options{Seed: seed, Trace: true})
		without := Run(Options{Seed: seed, Trace: true, NoCompaction: true})
		if with.Err != nil || without.Err != nil {
			t.Fatalf("seed %d: %v / %v", seed, with.Err, without.Err)
		}
		compacted += with.Stats.Compacted
		if a, b := withoutCompactions(with.Trace), without.Trace; a != b {
			al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
			for i := range min(len(al), len(bl)) {
				if al[i] != bl[i] {
					t.Fatalf("seed %d: with and without compaction, the runs part at line %d:\n%s\n%s", seed, i+1, al[i], bl[i])
				}
			}
			t.Fatalf("seed %d: one trace is a prefix of the other", seed)
		}
		if a, b := fmt.Sprintf("%+v", with.History.Operations()), fmt.Sprintf("%+v", without.History.Operations()); a != b {
			t.Fatalf("seed %d: the clients' histories differ with compaction", seed)
		}
		if _, err := CheckLinearizable(with.History, porcupineTimeout); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
	if compacted == 0 {
		t.Fatal("no seed compacted a heartbeat: the test shows nothing")
	}
	t.Logf("%d heartbeats compacted over the seeds", compacted)
}

// withoutCompactions drops the trace's lines of the compactions.
func withoutCompactions(trace string) string {
	var keep []string
	for _, l := range strings.Split(trace, "\n") {
		if !strings.Contains(l, "daemon: compacted ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
