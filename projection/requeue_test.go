package projection_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/projection"
)

// poisonLog is an evaluation capped at one requeue, lost twice: queued,
// lost (expired), queued again, lost again. The next event decides it.
func poisonLog() []event.Event {
	return []event.Event{
		{Type: event.TypeQueued, Time: 1, Job: "e", Kind: event.KindEvaluation, MaxRequeues: 1},
		{Type: event.TypeAcquired, Time: 2, Job: "e", Worker: "w"}, // lease 2
		{Type: event.TypeExpired, Time: 3, Job: "e", Lease: 2, Worker: "w", Reason: event.ReasonLeaseExpired},
		{Type: event.TypeQueued, Time: 3, Job: "e", Reason: event.ReasonLeaseExpired},
		{Type: event.TypeAcquired, Time: 4, Job: "e", Worker: "w"}, // lease 5
		{Type: event.TypeLost, Time: 5, Job: "e", Lease: 5, Worker: "w", Reason: "agent vanished"},
	}
}

// TestRequeueCap: the fold counts an evaluation's requeues after losses,
// refuses one past its cap, and takes lease.failed only at the cap; the
// failed job ends (retired) with its reason and its cap.
func TestRequeueCap(t *testing.T) {
	f := &folder{t: t, tab: projection.New()}
	f.apply(poisonLog()[:4]...)
	if n := f.tab.Requeues("e"); n != 1 {
		t.Fatalf("requeues after one loss: %d, want 1", n)
	}
	f.apply(poisonLog()[4:]...)
	refuse := func(e event.Event, want string) {
		t.Helper()
		before := f.tab.Snapshot()
		e.Seq = f.tab.Seq() + 1
		if err := f.tab.Apply(&e); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", e.String(), err, want)
		}
		if !bytes.Equal(before, f.tab.Snapshot()) {
			t.Errorf("the refused %s changed the table", e.String())
		}
	}
	refuse(event.Event{Type: event.TypeQueued, Job: "e", Reason: event.ReasonWorkerLost}, "queued again 1 times already, its max_requeues")
	f.apply(event.Event{Type: event.TypeFailed, Time: 6, Job: "e", Reason: event.LostTimes(2)})
	j, _ := f.tab.Job("e")
	if j.State != fsm.Failed || j.Reason != "lost 2 times" || j.MaxRequeues != 1 || j.Attempts != 0 || j.Leases != 2 {
		t.Fatalf("the poison job: %+v, want failed, \"lost 2 times\", max_requeues 1, no attempt, 2 leases", j)
	}
	if f.tab.JobCount(fsm.Failed) != 1 || f.tab.Count(event.TypeFailed) != 1 || f.tab.Requeues("e") != 0 {
		t.Errorf("counts after the failure: %d failed, %d lease.failed, %d requeues held", f.tab.JobCount(fsm.Failed), f.tab.Count(event.TypeFailed), f.tab.Requeues("e"))
	}

	// lease.failed only at the cap: not before it, not without one, not
	// for a run, not from a live lease.
	for _, tc := range []struct {
		name string
		log  []event.Event
		want string
	}{
		{"before the cap", []event.Event{
			{Type: event.TypeQueued, Job: "x", Kind: event.KindEvaluation, MaxRequeues: 2},
			{Type: event.TypeAcquired, Job: "x", Worker: "w"},
			{Type: event.TypeExpired, Job: "x", Lease: 2, Worker: "w"},
		}, "queued again 0 times, max_requeues 2: not at its cap"},
		{"without a cap", []event.Event{
			{Type: event.TypeQueued, Job: "x", Kind: event.KindEvaluation},
			{Type: event.TypeAcquired, Job: "x", Worker: "w"},
			{Type: event.TypeExpired, Job: "x", Lease: 2, Worker: "w"},
		}, "max_requeues 0: not at its cap"},
		{"from a live lease", []event.Event{
			{Type: event.TypeQueued, Job: "x", Kind: event.KindEvaluation, MaxRequeues: 1},
			{Type: event.TypeAcquired, Job: "x", Worker: "w"},
		}, "acquired: lease.failed not allowed"},
	} {
		g := &folder{t: t, tab: projection.New()}
		g.apply(tc.log...)
		e := event.Event{Seq: g.tab.Seq() + 1, Type: event.TypeFailed, Job: "x", Reason: "lost 1 times"}
		if err := g.tab.Apply(&e); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		e    event.Event
		want string
	}{
		{"a cap on a run", event.Event{Type: event.TypeQueued, Job: "r", Kind: event.KindRun, MaxRequeues: 1}, "max_requeues 1 on a run"},
	} {
		g := &folder{t: t, tab: projection.New()}
		e := tc.e
		e.Seq = 1
		if err := g.tab.Apply(&e); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	g := &folder{t: t, tab: projection.New()}
	g.apply(poisonLog()[:3]...)
	e := event.Event{Seq: g.tab.Seq() + 1, Type: event.TypeQueued, Job: "e", MaxRequeues: 5}
	if err := g.tab.Apply(&e); err == nil || !strings.Contains(err.Error(), "the cap is its submission's") {
		t.Errorf("a requeue naming a cap: %v", err)
	}
}

// TestRequeueCapSurvivesSnapshots: the cap and the count are in the
// snapshot: a table restored between the losses decides the next event as
// the one that folded the whole log.
func TestRequeueCapSurvivesSnapshots(t *testing.T) {
	f := &folder{t: t, tab: projection.New()}
	f.apply(poisonLog()...)
	restored, err := projection.Restore(f.tab.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if n := restored.Requeues("e"); n != 1 {
		t.Fatalf("restored requeues %d, want 1", n)
	}
	requeue := event.Event{Seq: f.tab.Seq() + 1, Type: event.TypeQueued, Job: "e", Reason: event.ReasonWorkerLost}
	if err := restored.Apply(&requeue); err == nil {
		t.Fatal("the restored table queued the capped job again")
	}
	fail := event.Event{Seq: f.tab.Seq() + 1, Type: event.TypeFailed, Job: "e", Reason: event.LostTimes(2)}
	for _, tab := range []*projection.Table{f.tab, restored} {
		e := fail
		if err := tab.Apply(&e); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(restored.Snapshot(), f.tab.Snapshot()) {
		t.Fatal("the restored table and the full fold differ after the failure")
	}
}

// TestArchiveKeepsTheCap: a capped job's archive record (version 2) keeps
// its cap; an uncapped one stays version 1, as a build before caps wrote
// it, so that a store it wrote verifies against this build's fold.
func TestArchiveKeepsTheCap(t *testing.T) {
	tab := projection.New()
	tab.SetRetire(projection.RetireRecord)
	f := &folder{t: t, tab: tab}
	f.apply(poisonLog()...)
	f.apply(event.Event{Type: event.TypeFailed, Time: 6, Job: "e", Reason: event.LostTimes(2)},
		event.Event{Type: event.TypeQueued, Job: "u", Kind: event.KindEvaluation},
		event.Event{Type: event.TypeCancelled, Job: "u", Reason: event.ReasonCancelled})
	versions := map[string]byte{}
	for _, r := range tab.TakeRetired() {
		id, _, ok := projection.ParseArchiveKey(r.Key)
		if !ok || id == "" {
			continue
		}
		versions[id] = r.Value[0]
		j, err := projection.DecodeJob(id, r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]int{"e": 1, "u": 0}[id]; j.MaxRequeues != want {
			t.Errorf("job %s decodes with max_requeues %d, want %d", id, j.MaxRequeues, want)
		}
		if id == "e" {
			bad := append([]byte{2}, r.Value[1:len(r.Value)-1]...)
			if _, err := projection.DecodeJob(id, append(bad, 0)); err == nil {
				t.Error("a version-2 record with a cap of 0 decoded")
			}
			if _, err := projection.DecodeJob(id, append([]byte{4}, r.Value[1:]...)); err == nil {
				t.Error("a version-4 record decoded")
			}
		}
	}
	if versions["e"] != 2 || versions["u"] != 1 {
		t.Errorf("record versions %v, want e 2 (capped) and u 1", versions)
	}
}

// TestOutcomes: the table counts reports by outcome, in its snapshot too,
// and a filter by outcome selects the jobs reported with it.
func TestOutcomes(t *testing.T) {
	f := &folder{t: t, tab: projection.New()}
	for i, o := range []event.Outcome{event.OutcomeFailed, event.OutcomeSucceeded, event.OutcomeFailed, event.OutcomeKilled} {
		id := string(rune('a' + i))
		seq := f.tab.Seq()
		f.apply(event.Event{Type: event.TypeQueued, Job: id, Kind: event.KindRun},
			event.Event{Type: event.TypeAcquired, Job: id, Worker: "w"},
			event.Event{Type: event.TypeReported, Job: id, Lease: seq + 2, Worker: "w", Outcome: o})
	}
	f.apply(event.Event{Type: event.TypeQueued, Job: "q", Kind: event.KindRun})
	restored, err := projection.Restore(f.tab.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	for _, tab := range []*projection.Table{f.tab, restored} {
		got := [...]uint64{tab.Reported(event.OutcomeSucceeded), tab.Reported(event.OutcomeFailed), tab.Reported(event.OutcomeCancelled), tab.Reported(event.OutcomeKilled), tab.Reported(event.OutcomeLost)}
		if got != [...]uint64{1, 2, 0, 1, 0} {
			t.Errorf("reported by outcome (succeeded, failed, cancelled, killed, lost): %v", got)
		}
	}
	var ids []string
	for _, j := range f.tab.JobsAfter(projection.JobFilter{Outcome: event.OutcomeFailed}, "", 10) {
		ids = append(ids, j.ID)
	}
	if got := strings.Join(ids, " "); got != "a c" {
		t.Errorf("jobs reported failed: %q, want a c", got)
	}
	if js := f.tab.Jobs(projection.JobFilter{State: fsm.Queued, Outcome: event.OutcomeFailed}); len(js) != 0 {
		t.Errorf("queued jobs reported failed: %v", js)
	}
}
