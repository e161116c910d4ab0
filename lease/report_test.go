package lease_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
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
