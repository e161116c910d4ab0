package projection_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/timing"
)

// folder applies events with consecutive sequence numbers.
type folder struct {
	t interface {
		Helper()
		Fatal(...any)
	}
	tab *projection.Table
}

func (f *folder) apply(evs ...event.Event) {
	f.t.Helper()
	for i := range evs {
		evs[i].Seq = f.tab.Seq() + 1
		if evs[i].Type == event.TypeAcquired {
			evs[i].Lease = evs[i].Seq
		}
		if err := f.tab.Apply(&evs[i]); err != nil {
			f.t.Fatal(err)
		}
	}
}

// sampleTable folds a log that touches every part of the table.
func sampleTable(t testing.TB) *projection.Table {
	f := &folder{t: t, tab: projection.New()}
	f.apply(sampleEvents()...)
	return f.tab
}

// sampleEvents is that log.
func sampleEvents() []event.Event {
	return []event.Event{
		{Type: event.TypeDaemonStarted, Time: 1},
		{Type: event.TypeQueued, Time: 2, Job: "r1", Kind: event.KindRun, Spec: []byte(`{"run":"x"}`)},
		{Type: event.TypeQueued, Time: 3, Job: "e1", Kind: event.KindEvaluation, MaxRequeues: 2},
		{Type: event.TypeQueued, Time: 3, Job: "e2", Kind: event.KindEvaluation},
		{Type: event.TypeAcquired, Time: 4, Job: "r1", Worker: "w1"}, // lease 5
		{Type: event.TypeAcquired, Time: 5, Job: "e1", Worker: "w2"}, // lease 6
		{Type: event.TypeRunning, Time: 6, Job: "r1", Lease: 5, Worker: "w1"},
		{Type: event.TypeRevoked, Time: 7, Job: "r1", Lease: 5, Worker: "w1", Mode: event.RevokeCancel},
		{Type: event.TypeDaemonResumed, Time: 100, Gap: 90},
		{Type: event.TypeWorkerUnreachable, Time: 200, Worker: "w2"},
		{Type: event.TypeExpired, Time: 400, Job: "e1", Lease: 6, Worker: "w2", Reason: event.ReasonLeaseExpired},
		{Type: event.TypeQueued, Time: 400, Job: "e1", Reason: event.ReasonLeaseExpired},
		{Type: event.TypeStaleReport, Time: 401, Job: "e1", Lease: 6, Worker: "w2", Outcome: event.OutcomeSucceeded, Ref: "refs/x"},
		{Type: event.TypeHeartbeat, Time: 402, Job: "r1", Lease: 5, Worker: "w1"},
		{Type: event.TypeReported, Time: 403, Job: "r1", Lease: 5, Worker: "w1", Outcome: event.OutcomeCancelled, Result: []byte(`{}`)},
		{Type: event.TypeQueued, Time: 404, Job: "r2", Kind: event.KindRun},
		{Type: event.TypeAcquired, Time: 405, Job: "r2", Worker: "w1"}, // lease 17
		// Two jobs of their own timing (one with scheduling beside it), and a
		// heartbeat's details.
		{Type: event.TypeQueued, Time: 406, Job: "t1", Kind: event.KindRun, Timing: ownTiming(2, 5, 60),
			Labels: event.MustLabels(map[string]string{"gpu": "a100"}), Priority: 2},
		{Type: event.TypeQueued, Time: 406, Job: "t2", Kind: event.KindEvaluation, Timing: ownTiming(2, 5, 100)},
		{Type: event.TypeAcquired, Time: 407, Job: "t1", Worker: "w1", Timing: ownTiming(2, 5, 60)},  // lease 20
		{Type: event.TypeAcquired, Time: 407, Job: "t2", Worker: "w3", Timing: ownTiming(2, 5, 100)}, // lease 21
		{Type: event.TypeHeartbeat, Time: 408, Job: "t1", Lease: 20, Worker: "w1", Details: []byte(`{"step":1}`)},
		{Type: event.TypeHeartbeat, Time: 408, Job: "t2", Lease: 21, Worker: "w3", Details: []byte(`{"step":2}`)},
		{Type: event.TypeReported, Time: 409, Job: "t2", Lease: 21, Worker: "w3", Outcome: event.OutcomeSucceeded},
	}
}

// ownTiming is a job's own timing, in the units of the sample's clock (ns).
func ownTiming(renew, grace, toleration time.Duration) timing.Config {
	return timing.Config{Renew: renew, Grace: grace, Toleration: toleration}
}

func TestSnapshotRoundTrip(t *testing.T) {
	tab := sampleTable(t)
	snap := tab.Snapshot()
	restored, err := projection.Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	// A snapshot holds what the table holds in memory, not what it retired.
	if !bytes.Equal(restored.Snapshot(), snap) {
		t.Fatal("snapshot of the restored table differs")
	}
	kept := tab.String()
	tab.SetRetire(projection.RetireDrop)
	if restored.String() != tab.String() {
		t.Fatalf("restored table differs:\n%s\nwant\n%s", restored, tab)
	}
	if !strings.Contains(kept, "job r1 run reported") || strings.Contains(tab.String(), "job r1") {
		t.Fatalf("RetireKeep should keep job r1, RetireDrop forget it:\n%s\n%s", kept, tab)
	}
	// The restored table must also behave the same: queue order and deadlines
	// are rebuilt, not stored.
	if got, want := fmt.Sprint(restored.Queued(0)), fmt.Sprint(tab.Queued(0)); got != want {
		t.Errorf("queue after restore %s, want %s", got, want)
	}
	l1, w1 := tab.Silent(10_000, 50, 300)
	l2, w2 := restored.Silent(10_000, 50, 300)
	if fmt.Sprint(l1, w1) != fmt.Sprint(l2, w2) {
		t.Errorf("silent after restore %v %v, want %v %v", l2, w2, l1, w1)
	}
	next := event.Event{Seq: tab.Seq() + 1, Type: event.TypeAcquired, Time: 500, Job: "e2", Worker: "w1", Lease: tab.Seq() + 1}
	for _, x := range []*projection.Table{tab, restored} {
		e := next
		if err := x.Apply(&e); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(restored.Snapshot(), tab.Snapshot()) {
		t.Fatal("tables diverge after the same event")
	}
}

// TestRestoreKeepsNothingOfItsInput: a table restored from bytes that are
// then overwritten is the table they held (a restart restores from a
// buffer of the store's, valid only until it returns).
func TestRestoreKeepsNothingOfItsInput(t *testing.T) {
	snap := sampleTable(t).Snapshot()
	buf := bytes.Clone(snap)
	restored, err := projection.Restore(buf)
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = 0xff
	}
	if !bytes.Equal(restored.Snapshot(), snap) {
		t.Fatalf("the restored table changed with the bytes it was restored from:\n%s", restored)
	}
}

// TestAppendSnapshotAppends: AppendSnapshot leaves what dst holds and
// writes Snapshot's bytes after it, into dst's room when it has enough.
func TestAppendSnapshotAppends(t *testing.T) {
	tab := sampleTable(t)
	snap := tab.Snapshot()
	dst := make([]byte, 3, 3+len(snap))
	copy(dst, "pre")
	got := tab.AppendSnapshot(dst)
	if !bytes.Equal(got, append([]byte("pre"), snap...)) {
		t.Fatalf("AppendSnapshot(%q) = %q, want %q then Snapshot's %q", dst, got, "pre", snap)
	}
	if &got[0] != &dst[0] {
		t.Error("AppendSnapshot made a new buffer though dst had room")
	}
}

func TestRestoreRefusesDamage(t *testing.T) {
	snap := sampleTable(t).Snapshot()
	for i := 0; i < len(snap); i += 7 {
		if _, err := projection.Restore(snap[:i]); !errors.Is(err, projection.ErrSnapshot) {
			t.Fatalf("restore of %d of %d bytes: %v", i, len(snap), err)
		}
	}
	if _, err := projection.Restore(append(bytes.Clone(snap), 0)); !errors.Is(err, projection.ErrSnapshot) {
		t.Fatalf("trailing byte: %v", err)
	}
}

// TestRestoreRefusesJobsOutOfPlace: a snapshot that lists a job twice, or
// two jobs at one place in the queue, is refused. The two jobs' records
// differ only in their ids and places, so that one byte makes either case.
func TestRestoreRefusesJobsOutOfPlace(t *testing.T) {
	tab := projection.New()
	for i, id := range []string{"ja", "jb"} {
		e := event.Event{Seq: uint64(i + 1), Type: event.TypeQueued, Time: 5, Job: id, Kind: event.KindEvaluation}
		if err := tab.Apply(&e); err != nil {
			t.Fatal(err)
		}
	}
	snap := tab.Snapshot()
	if _, err := projection.Restore(snap); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, from, to string }{
		{"listed twice", "\x02jb", "\x02ja"},
		{"one place", "\x0a\x0a\x02", "\x0a\x0a\x01"}, // jb's submitted, updated (5, zigzag), place 2 -> 1
	} {
		if n := bytes.Count(snap, []byte(tc.from)); n != 1 {
			t.Fatalf("%s: %q found %d times in the snapshot", tc.name, tc.from, n)
		}
		bad := bytes.Replace(snap, []byte(tc.from), []byte(tc.to), 1)
		if _, err := projection.Restore(bad); !errors.Is(err, projection.ErrSnapshot) {
			t.Errorf("%s: restored (%v)", tc.name, err)
		}
	}
}

// FuzzRestore: no bytes make Restore panic, and what it accepts snapshots
// back to the same bytes.
func FuzzRestore(f *testing.F) {
	f.Add(sampleTable(f).Snapshot())
	f.Add(projection.New().Snapshot())
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, err := projection.Restore(b)
		if err != nil {
			return
		}
		if again, err := projection.Restore(tab.Snapshot()); err != nil || !bytes.Equal(again.Snapshot(), tab.Snapshot()) {
			t.Fatalf("re-snapshot of an accepted snapshot: %v", err)
		}
	})
}

// FuzzApply: whatever events arrive, Apply never panics, and an event it
// refuses leaves the table as it was.
func FuzzApply(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{1, 1, 2, 2, 3, 13, 7, 1, 6, 2})
	f.Fuzz(func(t *testing.T, script []byte) {
		tab := projection.New()
		for i := 0; i+1 < len(script); i += 2 {
			e := event.Event{
				Seq: tab.Seq() + 1, Type: event.Type(script[i] % byte(event.NumTypes+1)), Time: int64(i),
				Job: fmt.Sprint("j", script[i+1]%3), Worker: fmt.Sprint("w", script[i+1]%2),
				Lease: uint64(script[i+1] % 8), Kind: event.Kind(script[i+1]%3 + 0), Mode: event.RevokeMode(script[i+1] % 3),
				Outcome: event.Outcome(script[i+1] % 6), Gap: int64(script[i+1]),
			}
			if e.Type == event.TypeAcquired {
				e.Lease = e.Seq
			}
			before := tab.Snapshot()
			if err := tab.Apply(&e); err != nil && !bytes.Equal(before, tab.Snapshot()) {
				t.Fatalf("refused %s changed the table: %v", e.String(), err)
			}
		}
	})
}

func TestApplyRefusesIllegalEvents(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   event.Event
		want string
	}{
		{"out of sequence", event.Event{Seq: 99, Type: event.TypeDaemonStopping}, "applied after"},
		{"unknown job", event.Event{Type: event.TypeCancelled, Job: "nope"}, "unknown job"},
		{"report on a stale lease", event.Event{Type: event.TypeReported, Job: "e1", Lease: 6, Worker: "w2", Outcome: event.OutcomeFailed}, "not live"},
		{"lease of a job that ended", event.Event{Type: event.TypeHeartbeat, Job: "r1", Lease: 5, Worker: "w1"}, "unknown lease 5"},
		{"lease of another worker", event.Event{Type: event.TypeHeartbeat, Job: "r2", Lease: 17, Worker: "w2"}, "belongs to worker"},
		{"acquire of a job not queued", event.Event{Type: event.TypeAcquired, Job: "r2", Worker: "w1"}, "not allowed"},
		{"acquire of a job that ended", event.Event{Type: event.TypeAcquired, Job: "r1", Worker: "w1"}, "unknown job"},
		{"stale report on a reported lease by another worker", event.Event{Type: event.TypeStaleReport, Job: "r1", Lease: 5, Worker: "w2", Outcome: event.OutcomeSucceeded}, "belongs to worker"},
		{"stale report on a lease never granted", event.Event{Type: event.TypeStaleReport, Job: "r1", Lease: 4, Worker: "w1", Outcome: event.OutcomeSucceeded}, "unknown lease 4"},
		{"acquire by an unreachable worker", event.Event{Type: event.TypeAcquired, Job: "e2", Worker: "w2"}, "unreachable"},
		{"stale report on a live lease", event.Event{Type: event.TypeStaleReport, Job: "e1", Lease: 6, Worker: "w2", Outcome: event.OutcomeSucceeded, Ref: "refs/x"}, "recorded twice"},
		{"unknown type", event.Event{Type: 99}, "unknown to this build"},
		{"lost as a report's outcome", event.Event{Type: event.TypeReported, Job: "r2", Lease: 17, Worker: "w1", Outcome: event.OutcomeLost}, "bad outcome"},
		{"lost by another worker", event.Event{Type: event.TypeLost, Job: "r2", Lease: 17, Worker: "w2"}, "belongs to worker"},
		{"lost on an expired lease", event.Event{Type: event.TypeLost, Job: "e1", Lease: 6, Worker: "w2"}, "not live"},
		{"submission without kind", event.Event{Type: event.TypeQueued, Job: "new"}, "bad kind"},
	} {
		tab := sampleTable(t)
		before := tab.Snapshot()
		e := tc.ev
		if e.Seq == 0 {
			e.Seq = tab.Seq() + 1
		}
		if e.Type == event.TypeAcquired {
			e.Lease = e.Seq
		}
		err := tab.Apply(&e)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.want)
		}
		if !bytes.Equal(before, tab.Snapshot()) {
			t.Errorf("%s: the refused event changed the table", tc.name)
		}
	}
}

// TestLostFoldsLikeExpiry: a lease its worker reports lost ends as an
// expiry would end it — a run fails ("worker lost"), an evaluation is
// expired and may be queued again — with no attempt counted, and the
// lease.lost is the lease's answer. A late claim on it (a report that
// differs from the loss) is a stale report: recorded, changing nothing else.
func TestLostFoldsLikeExpiry(t *testing.T) {
	f := &folder{t: t, tab: projection.New()}
	f.apply(
		event.Event{Type: event.TypeQueued, Time: 1, Job: "r", Kind: event.KindRun},
		event.Event{Type: event.TypeQueued, Time: 1, Job: "e", Kind: event.KindEvaluation},
		event.Event{Type: event.TypeAcquired, Time: 2, Job: "r", Worker: "w"}, // lease 3
		event.Event{Type: event.TypeAcquired, Time: 2, Job: "e", Worker: "w"}, // lease 4
		event.Event{Type: event.TypeRunning, Time: 3, Job: "r", Lease: 3, Worker: "w"},
		event.Event{Type: event.TypeLost, Time: 4, Job: "r", Lease: 3, Worker: "w", Reason: "self-fenced", Ref: "refs/r/3"},
		event.Event{Type: event.TypeLost, Time: 5, Job: "e", Lease: 4, Worker: "w", Reason: "worktree gone"},
	)
	tab := f.tab
	r, _ := tab.Job("r")
	if r.State != fsm.Failed || r.Reason != event.ReasonWorkerLost || r.Attempts != 0 || r.Outcome != 0 || r.Ref != "" {
		t.Errorf("lost run: %+v, want failed, %q, no attempt, no outcome", r, event.ReasonWorkerLost)
	}
	e, _ := tab.Job("e")
	if e.State != fsm.Expired || e.Attempts != 0 || e.Lease != 0 {
		t.Errorf("lost evaluation: %+v, want expired with no attempt and no live lease", e)
	}
	for id, seq := range map[uint64]uint64{3: 6, 4: 7} {
		if l, _ := tab.Lease(id); l.State != fsm.Expired || l.ReportSeq != seq {
			t.Errorf("lease %d: %+v, want expired with report %d", id, l, seq)
		}
	}
	if n := tab.LiveCount(fsm.Acquired) + tab.LiveCount(fsm.Running); n != 0 {
		t.Errorf("%d live leases after both were lost", n)
	}
	f.apply(event.Event{Type: event.TypeQueued, Time: 5, Job: "e", Reason: event.ReasonWorkerLost})
	if q := tab.Queued(0); len(q) != 1 || q[0].ID != "e" {
		t.Errorf("queue after the lost evaluation was queued again: %v", q)
	}
	before := tab.String()
	f.apply(event.Event{Type: event.TypeStaleReport, Job: "e", Lease: 4, Worker: "w", Outcome: event.OutcomeSucceeded})
	if want := withStale(before, tab.Seq()); tab.String() != want || tab.Count(event.TypeStaleReport) != 1 {
		t.Errorf("a late claim on the lost lease folded as\n%s\nwant\n%s", tab, want)
	}
}

// withStale is dump, a table's String, once the stale report of seq is
// folded into it: the same table at seq, with that record.
func withStale(dump string, seq uint64) string {
	_, rest, _ := strings.Cut(dump, " ")
	return fmt.Sprintf("seq=%d %s", seq, rest) + fmt.Sprintf("stale_report seq=%d\n", seq)
}

// TestStaleReportOnAReportedLease: a late claim on a lease already reported
// (the service decides that it differs from the first report) is a stale
// report: the fold records it, once per content, and changes nothing else;
// it must come from the lease's worker, as every report.
func TestStaleReportOnAReportedLease(t *testing.T) {
	tab := sampleTable(t) // lease 5 of r1, reported by w1
	f := &folder{t: t, tab: tab}
	before := tab.String()
	claim := event.Event{Type: event.TypeStaleReport, Job: "r1", Lease: 5, Worker: "w1", Outcome: event.OutcomeFailed, Ref: "refs/late"}
	f.apply(claim)
	if want := withStale(before, tab.Seq()); tab.String() != want {
		t.Fatalf("a late claim on the reported lease folded as\n%s\nwant\n%s", tab, want)
	}
	snap := tab.Snapshot()
	again := claim
	again.Seq = tab.Seq() + 1
	if err := tab.Apply(&again); err == nil || !strings.Contains(err.Error(), "recorded twice") {
		t.Errorf("the same late claim folded again: %v", err)
	}
	if !bytes.Equal(snap, tab.Snapshot()) {
		t.Error("the refused stale report changed the table")
	}
}

// TestFoldDoesNotAllocate: the events that make up almost all of a log
// (heartbeats, and the ends of leases) fold without allocating.
func TestFoldDoesNotAllocate(t *testing.T) {
	tab := sampleTable(t)
	f := &folder{t: t, tab: tab}
	f.apply(event.Event{Type: event.TypeAcquired, Time: 500, Job: "e2", Worker: "w1"})
	lease := tab.Seq()
	allocs := testing.AllocsPerRun(1000, func() {
		e := event.Event{Seq: tab.Seq() + 1, Type: event.TypeHeartbeat, Time: 600, Job: "e2", Lease: lease, Worker: "w1"}
		if err := tab.Apply(&e); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("heartbeat fold: %v allocations per event", allocs)
	}
	if l, _ := tab.Lease(lease); l.State != fsm.Acquired {
		t.Fatalf("lease %d is %s", lease, l.State)
	}
}

// TestRetireRecordAllocates: in the mode the daemon runs (RetireRecord), a
// job's whole life — submitted, acquired, started, heartbeated, reported and
// retired into archive records — costs one allocation (its id and spec)
// once the table's buffers have grown.
func TestRetireRecordAllocates(t *testing.T) {
	tab := projection.New()
	tab.SetRetire(projection.RetireRecord)
	ids := make([]string, 3000)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%d", i)
	}
	n := 0
	var evs [5]event.Event
	spec := []byte(`{"a":1}`)
	life := func() {
		id := ids[n%len(ids)]
		n++
		seq := tab.Seq()
		evs = [...]event.Event{
			{Type: event.TypeQueued, Job: id, Kind: event.KindRun, Spec: spec},
			{Type: event.TypeAcquired, Job: id, Worker: "w1", Lease: seq + 2},
			{Type: event.TypeRunning, Job: id, Worker: "w1", Lease: seq + 2},
			{Type: event.TypeHeartbeat, Job: id, Worker: "w1", Lease: seq + 2},
			{Type: event.TypeReported, Job: id, Worker: "w1", Lease: seq + 2, Outcome: event.OutcomeSucceeded, Ref: "refs/x"},
		}
		for i := range evs {
			evs[i].Seq, evs[i].Time = seq+uint64(i)+1, int64(seq)
			if err := tab.Apply(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if recs := tab.TakeRetired(); len(recs) != 2 {
			t.Fatalf("%d records retired, want the job's and its lease's", len(recs))
		}
	}
	for range 500 {
		life()
	}
	if allocs := testing.AllocsPerRun(2000, life); allocs > 1.05 {
		t.Fatalf("%.2f allocations per job, want 1", allocs)
	}
	if tab.JobCount(fsm.Reported) != n || len(tab.Jobs(projection.JobFilter{})) != 0 {
		t.Fatalf("%d reported, %d jobs held; want %d and none", tab.JobCount(fsm.Reported), len(tab.Jobs(projection.JobFilter{})), n)
	}
}
