package fsm

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/leaselog/leaselog/event"
)

// TestTableMatchesLibrary checks every (kind, state, event) cell of the derived
// table against looplab/fsm driven by the declaration.
func TestTableMatchesLibrary(t *testing.T) {
	cells := 0
	for _, k := range Kinds() {
		for s := None; s < numStates; s++ {
			for _, typ := range event.Types() {
				want, wantOK, err := viaLibrary(k, s, typ)
				if err != nil {
					t.Fatal(err)
				}
				got, gotOK := Next(k, s, typ)
				if got != want || gotOK != wantOK {
					t.Errorf("%s: %s on %s: table says (%s, %v), looplab/fsm says (%s, %v)", k, typ, s, got, gotOK, want, wantOK)
				}
				cells++
			}
		}
	}
	if want := len(Kinds()) * int(numStates) * (event.NumTypes - 1); cells != want {
		t.Fatalf("checked %d cells, want %d", cells, want)
	}
}

// TestLeasesPageEdges pins the edges the Leases page draws, so that a change to
// the declaration that drops one fails here and not in production.
func TestLeasesPageEdges(t *testing.T) {
	for _, tc := range []struct {
		kind     event.Kind
		from     State
		event    event.Type
		to       State
		accepted bool
	}{
		{event.KindRun, None, event.TypeQueued, Queued, true},
		{event.KindRun, Queued, event.TypeAcquired, Acquired, true},
		{event.KindRun, Acquired, event.TypeRunning, Running, true},
		{event.KindRun, Running, event.TypeHeartbeat, Running, true},
		{event.KindRun, Running, event.TypeReported, Reported, true},
		{event.KindRun, Acquired, event.TypeExpired, Failed, true},
		{event.KindRun, Running, event.TypeExpired, Failed, true},
		{event.KindRun, Queued, event.TypeCancelled, Cancelled, true},
		{event.KindEvaluation, Acquired, event.TypeExpired, Expired, true},
		{event.KindEvaluation, Running, event.TypeExpired, Expired, true},
		{event.KindEvaluation, Expired, event.TypeQueued, Queued, true},
		// A loss the worker reports is an expiry: a run fails, an evaluation is queued again.
		{event.KindRun, Acquired, event.TypeLost, Failed, true},
		{event.KindRun, Running, event.TypeLost, Failed, true},
		{event.KindEvaluation, Acquired, event.TypeLost, Expired, true},
		{event.KindEvaluation, Running, event.TypeLost, Expired, true},
		{event.KindEvaluation, Queued, event.TypeLost, None, false},
		{event.KindRun, Reported, event.TypeLost, None, false},
		// A poison evaluation: lost once more than its cap allows, it fails.
		{event.KindEvaluation, Expired, event.TypeFailed, Failed, true},
		{event.KindEvaluation, Queued, event.TypeFailed, None, false},
		{event.KindEvaluation, Running, event.TypeFailed, None, false},
		{event.KindRun, Failed, event.TypeFailed, None, false},
		{event.KindRun, Expired, event.TypeQueued, None, false},
		{event.KindRun, Reported, event.TypeReported, None, false},
		{event.KindRun, Queued, event.TypeRunning, None, false},
		{event.KindRun, Running, event.TypeStaleReport, None, false},
		{event.KindEvaluation, Cancelled, event.TypeAcquired, None, false},
	} {
		got, ok := Next(tc.kind, tc.from, tc.event)
		if ok != tc.accepted || (ok && got != tc.to) {
			t.Errorf("%s: %s on %s = (%s, %v), want (%s, %v)", tc.kind, tc.event, tc.from, got, ok, tc.to, tc.accepted)
		}
	}
}

func TestNextOutOfRange(t *testing.T) {
	if _, ok := Next(event.Kind(9), Queued, event.TypeAcquired); ok {
		t.Error("unknown kind accepted")
	}
	if _, ok := Next(event.KindRun, State(200), event.TypeAcquired); ok {
		t.Error("unknown state accepted")
	}
	if _, ok := Next(event.KindRun, Queued, event.Type(200)); ok {
		t.Error("unknown type accepted")
	}
}

func TestStateNames(t *testing.T) {
	for _, s := range States() {
		got, err := ParseState(s.String())
		if err != nil || got != s {
			t.Errorf("ParseState(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseState("sleeping"); err == nil {
		t.Error("ParseState accepted an unknown state")
	}
}

// TestDiagram is the golden file of the state diagram: rewrite it with -rewrite
// after changing the declaration, and review the diff.
func TestDiagram(t *testing.T) {
	datadriven.RunTest(t, "testdata/diagram", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "diagram":
			var kind string
			d.ScanArgs(t, "kind", &kind)
			k, err := event.ParseKind(kind)
			if err != nil {
				return err.Error()
			}
			out, err := Diagram(k)
			if err != nil {
				return err.Error()
			}
			return out
		case "table":
			var kind string
			d.ScanArgs(t, "kind", &kind)
			k, err := event.ParseKind(kind)
			if err != nil {
				return err.Error()
			}
			var b strings.Builder
			for _, s := range append([]State{None}, States()...) {
				var moves []string
				for _, typ := range event.Types() {
					if to, ok := Next(k, s, typ); ok {
						moves = append(moves, fmt.Sprintf("%s→%s", typ, to))
					}
				}
				if len(moves) == 0 {
					moves = []string{"(final)"}
				}
				fmt.Fprintf(&b, "%-9s %s\n", s, strings.Join(moves, " "))
			}
			return b.String()
		}
		return fmt.Sprintf("unknown command %q", d.Cmd)
	})
}

func BenchmarkNext(b *testing.B) {
	var s State
	for i := 0; i < b.N; i++ {
		s, _ = Next(event.KindEvaluation, Running, event.TypeHeartbeat)
	}
	_ = s
}
