package projection_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/projection"
)

func labels(pairs ...string) event.Labels {
	l, err := event.ParseLabels(pairs)
	if err != nil {
		panic(err)
	}
	return l
}

func ids(js []projection.Job) string {
	var s []string
	for _, j := range js {
		s = append(s, j.ID)
	}
	return strings.Join(s, " ")
}

// TestPick: a worker takes only what its kinds and labels allow, the
// highest priority first, then the first queued; an evaluation queued again
// keeps its place; a job not yet due is taken by no one until promoted.
func TestPick(t *testing.T) {
	f := &folder{t: t, tab: projection.New()}
	gpu := labels("gpu=a100")
	f.apply(
		event.Event{Type: event.TypeDaemonStarted, Time: 1},
		event.Event{Type: event.TypeQueued, Time: 1, Job: "e-old", Kind: event.KindEvaluation},                     // 2
		event.Event{Type: event.TypeQueued, Time: 1, Job: "e-gpu", Kind: event.KindEvaluation, Labels: gpu},        // 3
		event.Event{Type: event.TypeQueued, Time: 1, Job: "r-urgent", Kind: event.KindRun, Priority: 10},           // 4
		event.Event{Type: event.TypeQueued, Time: 1, Job: "e-late", Kind: event.KindEvaluation, NotBefore: 100},    // 5
		event.Event{Type: event.TypeQueued, Time: 1, Job: "e-low", Kind: event.KindEvaluation, Priority: -1},       // 6
		event.Event{Type: event.TypeQueued, Time: 1, Job: "r-repo", Kind: event.KindRun, Labels: labels("repo=x")}, // 7
	)
	for _, tc := range []struct {
		name string
		o    projection.Offer
		want string
	}{
		{"everything unlabelled", projection.Offer{}, "r-urgent e-old e-low"},
		{"evaluations", projection.Offer{Kinds: []event.Kind{event.KindEvaluation}}, "e-old e-low"},
		{"evaluations on a gpu", projection.Offer{Kinds: []event.Kind{event.KindEvaluation}, Labels: labels("gpu=a100", "zone=eu")}, "e-old e-gpu e-low"},
		{"another gpu", projection.Offer{Labels: labels("gpu=h100")}, "r-urgent e-old e-low"},
		{"runs of repo x", projection.Offer{Kinds: []event.Kind{event.KindRun}, Labels: labels("repo=x")}, "r-urgent r-repo"},
	} {
		if got := ids(f.tab.Pick(tc.o, 10)); got != tc.want {
			t.Errorf("%s: picked %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := ids(f.tab.Pick(projection.Offer{}, 1)); got != "r-urgent" {
		t.Errorf("pick 1: %q", got)
	}

	// Not yet due: nobody takes it, and a grant before its time is refused.
	if n := f.tab.Promote(99); n != 0 {
		t.Errorf("promoted %d at 99, want none", n)
	}
	early := event.Event{Seq: f.tab.Seq() + 1, Lease: f.tab.Seq() + 1, Type: event.TypeAcquired, Time: 99, Job: "e-late", Worker: "w"}
	if err := f.tab.Apply(&early); err == nil || !strings.Contains(err.Error(), "before its not_before") {
		t.Errorf("a grant before not_before: %v", err)
	}
	if due, ok := f.tab.NextDue(); !ok || due != 100 {
		t.Errorf("NextDue = %d, %v; want 100", due, ok)
	}
	if n := f.tab.Promote(100); n != 1 {
		t.Errorf("promoted %d at 100, want 1", n)
	}
	if got := ids(f.tab.Pick(projection.Offer{Kinds: []event.Kind{event.KindEvaluation}}, 10)); got != "e-old e-late e-low" {
		t.Errorf("after promotion: %q", got)
	}

	// e-old is granted, lost, queued again: it keeps its place, before e-late.
	f.apply(
		event.Event{Type: event.TypeAcquired, Time: 100, Job: "e-old", Worker: "w"},
		event.Event{Type: event.TypeExpired, Time: 200, Job: "e-old", Lease: f.tab.Seq() + 1, Reason: event.ReasonLeaseExpired},
		event.Event{Type: event.TypeQueued, Time: 200, Job: "e-old", Reason: event.ReasonLeaseExpired},
	)
	if got := ids(f.tab.Pick(projection.Offer{Kinds: []event.Kind{event.KindEvaluation}}, 10)); got != "e-old e-late e-low" {
		t.Errorf("after the requeue: %q", got)
	}
	if got := ids(f.tab.Queued(0)); got != "r-urgent e-old e-gpu e-late r-repo e-low" {
		t.Errorf("Queued: %q", got)
	}
	again := event.Event{Seq: f.tab.Seq() + 1, Type: event.TypeCancelled, Time: 201, Job: "e-gpu"}
	if err := f.tab.Apply(&again); err != nil {
		t.Fatal(err)
	}
	if got := f.tab.Classes(); len(got) != 3 {
		t.Errorf("classes %v, want run{}, run{repo=x}, evaluation{}", got)
	}
}

// TestPickMatchesScan folds random logs of submissions (kinds, labels,
// priorities, delays), grants, losses and cancellations, and holds every
// pick to the plain rule computed over every queued job — and a table
// restored from a snapshot to the same picks.
func TestPickMatchesScan(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f := &folder{t: rt, tab: projection.New()}
		f.apply(event.Event{Type: event.TypeDaemonStarted, Time: 1})
		labelSets := []event.Labels{"", labels("gpu=a100"), labels("repo=x"), labels("gpu=a100", "repo=x"), labels("gpu=h100")}
		kinds := []event.Kind{event.KindRun, event.KindEvaluation}
		offer := rapid.Custom(func(t *rapid.T) projection.Offer {
			o := projection.Offer{Labels: rapid.SampledFrom(labelSets).Draw(t, "offer")}
			if rapid.Bool().Draw(t, "some kinds") {
				o.Kinds = []event.Kind{rapid.SampledFrom(kinds).Draw(t, "kind")}
			}
			return o
		})
		now, n := int64(1), 0
		for range rapid.IntRange(1, 80).Draw(rt, "steps") {
			now += rapid.Int64Range(0, 5).Draw(rt, "tick")
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0, 1:
				n++
				e := event.Event{Type: event.TypeQueued, Time: now, Job: fmt.Sprintf("j%d", n),
					Kind: rapid.SampledFrom(kinds).Draw(rt, "kind"), Labels: rapid.SampledFrom(labelSets).Draw(rt, "labels"),
					Priority: int32(rapid.IntRange(-1, 2).Draw(rt, "priority"))}
				if rapid.Bool().Draw(rt, "delayed") {
					e.NotBefore = now + rapid.Int64Range(-3, 20).Draw(rt, "delay")
				}
				f.apply(e)
			case 2: // a worker takes what Pick gives it
				f.tab.Promote(now)
				o := offer.Draw(rt, "worker")
				mx := rapid.IntRange(1, 3).Draw(rt, "max")
				picked := f.tab.Pick(o, mx)
				if want := scan(f.tab, o, now, mx); ids(picked) != ids(want) {
					rt.Fatalf("offer %v at %d: picked %q, the rule gives %q", o, now, ids(picked), ids(want))
				}
				restored, err := projection.Restore(f.tab.Snapshot())
				if err != nil {
					rt.Fatal(err)
				}
				restored.Promote(now)
				if got := restored.Pick(o, len(picked)); ids(got) != ids(picked) {
					rt.Fatalf("restored table picks %q, live %q", ids(got), ids(picked))
				}
				for _, j := range picked {
					lease := f.tab.Seq() + 1
					f.apply(event.Event{Type: event.TypeAcquired, Time: now, Job: j.ID, Worker: "w"})
					if j.Kind == event.KindEvaluation && rapid.Bool().Draw(rt, "lost") {
						f.apply(event.Event{Type: event.TypeExpired, Time: now, Job: j.ID, Lease: lease, Reason: event.ReasonLeaseExpired},
							event.Event{Type: event.TypeQueued, Time: now, Job: j.ID, Reason: event.ReasonLeaseExpired})
					}
				}
			case 3:
				if q := f.tab.Queued(0); len(q) > 0 {
					f.apply(event.Event{Type: event.TypeCancelled, Time: now, Job: rapid.SampledFrom(q).Draw(rt, "cancel").ID})
				}
			}
		}
	})
}

// scan is the rule, the plain way: every queued job o takes, due at now,
// the highest priority first, then the first queued.
func scan(t *projection.Table, o projection.Offer, now int64, n int) []projection.Job {
	var out []projection.Job
	for _, j := range t.Jobs(projection.JobFilter{State: fsm.Queued}) {
		if o.Takes(j.Kind, j.Labels) && j.NotBefore <= now {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b projection.Job) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.Place, b.Place))
	})
	return out[:min(n, len(out))]
}

// TestArchiveKeepsScheduling: a job with labels, a priority or a not_before
// is archived as version 3 with them, so that a filter by label finds it
// after it ended; damaged labels are refused.
func TestArchiveKeepsScheduling(t *testing.T) {
	tab := projection.New()
	tab.SetRetire(projection.RetireRecord)
	f := &folder{t: t, tab: tab}
	gpu := labels("gpu=a100")
	f.apply(event.Event{Type: event.TypeQueued, Time: 1, Job: "s", Kind: event.KindEvaluation, Labels: gpu, Priority: -3, NotBefore: 50, MaxRequeues: 2},
		event.Event{Type: event.TypeCancelled, Time: 2, Job: "s", Reason: event.ReasonCancelled})
	recs := tab.TakeRetired()
	if len(recs) != 1 || recs[0].Value[0] != 3 {
		t.Fatalf("records %q, want one of version 3", recs)
	}
	j, err := projection.DecodeJob("s", recs[0].Value)
	if err != nil || j.Labels != gpu || j.Priority != -3 || j.NotBefore != 50 || j.MaxRequeues != 2 {
		t.Fatalf("decoded %+v, %v", j, err)
	}
	if !(projection.JobFilter{Labels: gpu}).Selects(j) || (projection.JobFilter{Labels: labels("gpu=h100")}).Selects(j) {
		t.Error("a filter by label does not select by the archived labels")
	}
	bad := bytes.Replace(recs[0].Value, []byte("gpu"), []byte("g=u"), 1)
	if _, err := projection.DecodeJob("s", bad); !errors.Is(err, projection.ErrArchive) {
		t.Errorf("damaged labels: %v, want ErrArchive", err)
	}
}
