package lease_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
)

// TestLongReportsAreKept: nothing a worker says is refused for its length. A
// ref or reason past its limit is kept cut on a UTF-8 boundary, with a note
// of how many bytes were cut; a result past its limit is dropped and the
// reason says so. Malformed JSON is still refused, and records nothing.
func TestLongReportsAreKept(t *testing.T) {
	// Three-byte runes, so that a cut at a byte limit falls inside one.
	long := func(n int) string { return strings.Repeat("é€", n/5+1)[:n-n%5] }
	reason, ref := long(lease.MaxReasonLen+1234), long(lease.MaxRefLen+77)
	bigResult := `{"log":"` + strings.Repeat("x", lease.MaxResultLen) + `"}`
	for _, tc := range []struct {
		name  string
		r     lease.Report
		check func(t *testing.T, e event.Event)
	}{
		{"reason", lease.Report{Outcome: event.OutcomeFailed, Reason: reason}, func(t *testing.T, e event.Event) {
			checkCut(t, "reason", reason, e.Reason, lease.MaxReasonLen)
		}},
		{"ref", lease.Report{Outcome: event.OutcomeSucceeded, Ref: ref}, func(t *testing.T, e event.Event) {
			checkCut(t, "ref", ref, e.Ref, lease.MaxRefLen)
		}},
		{"result", lease.Report{Outcome: event.OutcomeSucceeded, Reason: "done", Result: []byte(bigResult)}, func(t *testing.T, e event.Event) {
			want := fmt.Sprintf("done [result of %d bytes dropped: over the %d-byte limit]", len(bigResult), lease.MaxResultLen)
			if len(e.Result) != 0 || e.Reason != want {
				t.Errorf("result of %d bytes: kept %d bytes, reason %q; want none and %q", len(bigResult), len(e.Result), e.Reason, want)
			}
		}},
		{"result and reason", lease.Report{Outcome: event.OutcomeLost, Reason: reason, Result: []byte(bigResult)}, func(t *testing.T, e event.Event) {
			if len(e.Reason) > lease.MaxReasonLen || !strings.HasSuffix(e.Reason, "-byte limit]") || !strings.Contains(e.Reason, "…[cut ") || len(e.Result) != 0 {
				t.Errorf("long reason and result: reason of %d bytes ending %q, result of %d", len(e.Reason), e.Reason[len(e.Reason)-80:], len(e.Result))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.busy()
			a, err := f.svc.Report(ctx, "w1", busyRun, tc.r)
			f.must(err)
			e, err := f.log.Get(a.Seq)
			f.must(err)
			tc.check(t, e)
			// Cut the same way every time: the same report again is the same.
			again, err := f.svc.Report(ctx, "w1", busyRun, tc.r)
			if err != nil || again != a {
				t.Errorf("the same long report again: %+v, %v; want %+v", again, err, a)
			}
		})
	}

	f := newFixture(t)
	f.busy()
	last := f.log.LastSeq()
	_, err := f.svc.Report(ctx, "w1", busyRun, lease.Report{Outcome: event.OutcomeSucceeded, Result: []byte(`{"score":`)})
	if !errors.Is(err, lease.ErrInvalid) || f.log.LastSeq() != last {
		t.Fatalf("malformed result: %v, log at %d (was %d); want ErrInvalid and nothing recorded", err, f.log.LastSeq(), last)
	}
}

// checkCut checks that got is sent cut to at most limit bytes: a prefix of
// it, on a rune boundary, and a note of exactly how much was cut.
func checkCut(t *testing.T, what, sent, got string, limit int) {
	t.Helper()
	i := strings.LastIndex(got, "…[cut ")
	if i < 0 || len(got) > limit || !utf8.ValidString(got) || !strings.HasPrefix(sent, got[:i]) {
		t.Fatalf("%s of %d bytes kept as %d bytes ending %q", what, len(sent), len(got), got[max(0, len(got)-40):])
	}
	if want := fmt.Sprintf("…[cut %d bytes]", len(sent)-i); got[i:] != want {
		t.Errorf("%s: note %q, want %q", what, got[i:], want)
	}
	if len(got) < limit-len("…[cut 9999 bytes]")-utf8.UTFMax {
		t.Errorf("%s: kept %d bytes of %d allowed: cut more than needed", what, len(got), limit)
	}
}

// TestDifferentSecondReport: after a report was accepted, a later report of
// the same lease is a retry — the first answer, nothing recorded — when it
// has the first's outcome and a ref and a result each left out or the
// first's (normalised), whatever its reason; anything else is a late claim on
// a lease no longer held: refused as stale, kept once as lease.stale_report
// with what it said, and answered the same when sent again. So by Report and
// by ReportNext (which acquires for neither), for a lease still in the table
// (an evaluation lost and queued again) and one in the archive (a run
// reported), and after a restart from a snapshot.
func TestDifferentSecondReport(t *testing.T) {
	shortened := "report refused (400 bad_request: result: invalid JSON); sent again without result and ref; reason: done"
	for _, tc := range []struct {
		name  string
		kind  event.Kind
		first lease.Report
		other event.Outcome // an outcome the first is not
	}{
		{"reported run", event.KindRun, lease.Report{Outcome: event.OutcomeSucceeded, Ref: "refs/a", Reason: "done", Result: []byte(`{"score": 1}`)}, event.OutcomeLost},
		{"lost evaluation", event.KindEvaluation, lease.Report{Outcome: event.OutcomeLost, Ref: "refs/a", Reason: "self-fenced", Result: []byte(`{"score": 1}`)}, event.OutcomeSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			_, _, err := f.svc.Submit(ctx, "j", tc.kind, nil)
			f.must(err)
			f.submit("next") // queued: a report with next that acquired would take it
			gs, err := f.svc.Acquire(ctx, "w1", 1)
			f.must(err)
			id := gs[0].Lease
			first, err := f.svc.Report(ctx, "w1", id, tc.first)
			f.must(err)
			o := tc.first.Outcome
			retries := []lease.Report{
				tc.first,
				{Outcome: o, Ref: "refs/a", Reason: "another reason", Result: []byte(`{"score": 1}`)},
				{Outcome: o, Reason: shortened},
				{Outcome: o},
				{Outcome: o, Ref: "refs/a"},
				{Outcome: o, Result: []byte(`{ "score" : 1 }`)}, // compared compact
			}
			claims := []struct {
				r       lease.Report
				differs string
			}{
				{lease.Report{Outcome: event.OutcomeFailed, Ref: "refs/a", Reason: "done", Result: []byte(`{"score": 1}`)}, "outcome"},
				{lease.Report{Outcome: tc.other, Reason: shortened}, "outcome"},
				{lease.Report{Outcome: o, Ref: "refs/b"}, "ref"},
				{lease.Report{Outcome: o, Ref: "refs/a", Result: []byte(`{"score": 2}`)}, "result"},
			}
			stale := map[int]lease.Answer{} // claim -> its answer
			check := func(when string) {
				t.Helper()
				inTable := false
				f.must(f.svc.View(ctx, func(tab *projection.Table) { _, inTable = tab.Lease(id) }))
				if inTable != (tc.kind == event.KindEvaluation) {
					t.Fatalf("%s: lease %d in the table: %v", when, id, inTable)
				}
				for i, r := range retries {
					before := f.log.LastSeq()
					a, err := f.svc.Report(ctx, "w1", id, r)
					an, gs, errn := f.svc.ReportNext(ctx, "w1", id, r, lease.AcquireOptions{Max: 1})
					if err != nil || a != first || errn != nil || an != first || gs != nil || f.log.LastSeq() != before {
						t.Errorf("%s: retry %d (%+v): %+v %v, with next %+v %v %v, recorded %d events; want the first answer %+v, no grants, nothing recorded",
							when, i, r, a, err, an, gs, errn, f.log.LastSeq()-before, first)
					}
				}
				for i, c := range claims {
					before := f.log.LastSeq()
					a, err := f.svc.Report(ctx, "w1", id, c.r)
					if !errors.Is(err, lease.ErrStaleLease) || !a.Stale || a.Lease != id || a.Job != "j" ||
						!strings.Contains(err.Error(), fmt.Sprintf("reported at seq %d, and this report's %s differs", first.Seq, c.differs)) {
						t.Fatalf("%s: claim %d (%+v): %+v %v; want a stale answer saying the %s differs", when, i, c.r, a, err, c.differs)
					}
					if prev, ok := stale[i]; ok {
						if a != prev || f.log.LastSeq() != before {
							t.Errorf("%s: claim %d again: %+v, recorded %d events; want %+v, nothing recorded", when, i, a, f.log.LastSeq()-before, prev)
						}
					} else {
						e, err := f.log.Get(a.Seq)
						f.must(err)
						if e.Type != event.TypeStaleReport || e.Lease != id || e.Worker != "w1" || e.Outcome != c.r.Outcome ||
							e.Ref != c.r.Ref || e.Reason != c.r.Reason || (len(c.r.Result) > 0) != (len(e.Result) > 0) || f.log.LastSeq() != before+1 {
							t.Errorf("%s: claim %d answered seq %d, which holds %s (%d events recorded)", when, i, a.Seq, e.String(), f.log.LastSeq()-before)
						}
						stale[i] = a
					}
					an, gs, errn := f.svc.ReportNext(ctx, "w1", id, c.r, lease.AcquireOptions{Max: 1})
					if !errors.Is(errn, lease.ErrStaleLease) || an != stale[i] || gs != nil {
						t.Errorf("%s: claim %d with next: %+v %v %v; want %+v, no grants", when, i, an, gs, errn, stale[i])
					}
				}
				j, err := f.svc.Job(ctx, "j")
				f.must(err)
				if j.Attempts != map[bool]int{true: 1}[tc.first.Outcome != event.OutcomeLost] || (tc.kind == event.KindRun && (j.Outcome != o || j.Ref != "refs/a" || string(j.Result) != `{"score":1}`)) {
					t.Errorf("%s: job %+v: the first report is no longer the one that counted", when, j)
				}
			}
			check("first life")
			f.must(f.svc.Close()) // a snapshot: the restart restores it
			f.must(f.log.Close())
			f.open()
			if f.svc.Rebuilt().SnapshotSeq == 0 {
				t.Fatal("the restart restored no snapshot")
			}
			check("after a restart")
		})
	}
}

// TestFirstReportMisnamed: a lease whose record names, as its first report,
// an event that is not its report (a corrupt archive) makes a report on it
// fail with an error naming the lease and the seq, recording nothing and
// answering nothing from it.
func TestFirstReportMisnamed(t *testing.T) {
	f := newFixture(t)
	f.submit("j")
	gs, err := f.svc.Acquire(ctx, "w1", 1)
	f.must(err)
	id := gs[0].Lease
	first, err := f.svc.Report(ctx, "w1", id, lease.Report{Outcome: event.OutcomeSucceeded})
	f.must(err)
	key := projection.ArchiveLeaseKey(id)
	rec, err := f.log.Archived(key)
	f.must(err)
	// The record ends with the report's seq, one byte long here: name the
	// lease's lease.acquired instead.
	if rec[len(rec)-1] != byte(first.Seq) {
		t.Fatalf("archived lease %d ends %x, not its report's seq %d", id, rec[len(rec)-1], first.Seq)
	}
	rec[len(rec)-1] = byte(id)
	f.must(f.log.PutArchive([]eventlog.Record{{Key: key, Value: rec}}, false))
	before := f.log.LastSeq()
	a, err := f.svc.Report(ctx, "w1", id, lease.Report{Outcome: event.OutcomeSucceeded})
	want := fmt.Sprintf("lease %d names seq %d as its first report", id, id)
	if !errors.Is(err, eventlog.ErrCorrupt) || !strings.Contains(err.Error(), want) || a != (lease.Answer{}) || f.log.LastSeq() != before {
		t.Fatalf("report on a lease whose record misnames its report: %+v, %v; want an error saying %q, nothing recorded", a, err, want)
	}
}
