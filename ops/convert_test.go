package ops

import (
	"testing"

	"github.com/leaselog/leaselog/lease"
)

// TestDirectivesOf: every directive of the service has its API spelling, and
// it is the same word, so that the JSON of a heartbeat answer is what it was
// when api used the service's type.
func TestDirectivesOf(t *testing.T) {
	all := []lease.Directive{lease.Continue, lease.Cancel, lease.Kill, lease.Gone}
	for i, d := range all {
		a, ok := directives[d]
		if !ok || string(a) != string(d) {
			t.Errorf("lease directive %q: API %q (in the table: %v)", d, a, ok)
		}
		got := DirectivesOf([]lease.LeaseDirective{{Lease: uint64(i + 1), Directive: d}})
		if len(got) != 1 || got[0].Lease != uint64(i+1) || got[0].Directive != a {
			t.Errorf("DirectivesOf(%q) = %+v", d, got)
		}
	}
	if got := DirectivesOf(nil); got == nil || len(got) != 0 {
		t.Errorf("DirectivesOf(nil) = %#v, want an empty slice", got)
	}
}
