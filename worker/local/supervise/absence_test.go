package supervise

import (
	"testing"
	"time"
)

// The count of the store's absence, look by look: only the time between two
// consecutive looks that both found the lock free on the same, unchanged
// file counts, from the end of the first to the start of the second; a held
// lock, a file changed or missing, a new deadline break it; nothing counts
// before a look found the lock held.
func TestAbsence(t *testing.T) {
	var (
		a, b    = FileID{Dev: 1, Ino: 7, Ctime: 100}, FileID{Dev: 1, Ino: 7, Ctime: 200}
		other   = FileID{Dev: 1, Ino: 9, Ctime: 300} // another file at the path
		held    = StoreLook{File: a, Holder: 42}
		free    = StoreLook{Free: true, File: a}
		freeB   = StoreLook{Free: true, File: b}
		heldO   = StoreLook{File: other, Holder: 43}
		freeO   = StoreLook{Free: true, File: other}
		missing = StoreLook{}
	)
	// A step is a look from start to end (ms on the fence clock), or a new
	// deadline read (deadline: true), and the credit after it.
	type step struct {
		start, end int
		look       StoreLook
		deadline   bool
		credit     int // ms
	}
	look := func(start, end int, l StoreLook, credit int) step {
		return step{start: start, end: end, look: l, credit: credit}
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a stopped or hung daemon holds the lock: nothing moves", []step{
			look(0, 1, held, 0), look(25, 26, held, 0), look(50, 51, held, 0)}},
		{"free after held: from the end of one look to the start of the next", []step{
			look(0, 1, held, 0), look(25, 26, free, 0), look(50, 51, free, 24), look(75, 76, free, 48)}},
		{"a slow look counts none of its own time", []step{
			look(0, 10, held, 0), look(25, 35, free, 0), look(50, 60, free, 15)}},
		{"the first free look after a held one counts nothing: the daemon may have died just before it", []step{
			look(0, 1, held, 0), look(1000, 1001, free, 0)}},
		{"held between two free looks: the pair around it counts nothing", []step{
			look(0, 1, held, 0), look(25, 26, free, 0), look(50, 51, held, 0), look(75, 76, free, 0), look(100, 101, free, 24)}},
		{"the file changed between two free looks (a daemon came and went): not that pair", []step{
			look(0, 1, held, 0), look(25, 26, free, 0), look(5000, 5001, freeB, 0), look(5025, 5026, freeB, 24)}},
		{"a missing file is not free", []step{
			look(0, 1, held, 0), look(25, 26, free, 0), look(50, 51, missing, 0), look(75, 76, free, 0), look(100, 101, free, 24)}},
		{"never held: a lock no daemon takes moves nothing", []step{
			look(0, 1, free, 0), look(25, 26, free, 0), look(50, 51, free, 0)}},
		{"a missing file does not arm the count either", []step{
			look(0, 1, missing, 0), look(25, 26, free, 0), look(50, 51, free, 0)}},
		{"a new deadline starts from zero, and from the next look", []step{
			look(0, 1, held, 0), look(25, 26, free, 0), look(50, 51, free, 24),
			{deadline: true}, look(75, 76, free, 0), look(100, 101, free, 24)}},
		{"a clock that did not move counts nothing", []step{
			look(0, 1, held, 0), look(25, 26, free, 0), look(26, 26, free, 0), look(20, 21, free, 0)}},
		{"a look with no clock arms the count, and is not counted from", []step{
			{look: held}, look(25, 26, free, 0), look(50, 51, free, 24)}},
		{"nor counted to", []step{
			look(0, 1, held, 0), look(25, 26, free, 0), {look: free}, look(50, 51, free, 0), look(75, 76, free, 24)}},
		{"a file put in the place of the one locked counts only once found locked", []step{
			look(0, 1, held, 0), look(25, 26, free, 0), look(50, 51, freeO, 0), look(75, 76, freeO, 0),
			look(100, 101, heldO, 0), look(125, 126, freeO, 0), look(150, 151, freeO, 24)}},
		{"held again keeps what was counted", []step{
			look(0, 1, held, 0), look(25, 26, free, 0), look(50, 51, free, 24), look(75, 76, held, 24), look(100, 101, held, 24)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var abs Absence
			epoch := time.Unix(1000, 0)
			ms := func(n int) time.Time { return epoch.Add(time.Duration(n) * time.Millisecond) }
			at := func(s step) (time.Time, time.Time) {
				if s.start == 0 && s.end == 0 {
					return time.Time{}, time.Time{} // a look with no clock
				}
				return ms(s.start), ms(s.end)
			}
			for i, s := range tc.steps {
				if s.deadline {
					abs.NewDeadline()
				} else {
					before := abs.Credit()
					start, end := at(s)
					add := abs.Look(start, end, s.look)
					if add != abs.Credit()-before {
						t.Errorf("step %d: Look returned %v, the credit moved %v", i, add, abs.Credit()-before)
					}
					if abs.Free() != s.look.Free {
						t.Errorf("step %d: Free() = %v after a look that found %+v", i, abs.Free(), s.look)
					}
				}
				if got, want := abs.Credit(), time.Duration(s.credit)*time.Millisecond; got != want {
					t.Fatalf("step %d (%+v): credit %v, want %v", i, s, got, want)
				}
			}
		})
	}
}
