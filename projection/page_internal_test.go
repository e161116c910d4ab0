package projection

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
)

// jobsAfterScan is JobsAfter as it was before the jobs had an index by id:
// a walk of every job held and retired, keeping the n smallest. It is the
// oracle the index is checked against, and the "before" of the benchmark.
func (t *Table) jobsAfterScan(f JobFilter, after string, n int) []Job {
	b := smallest[Job]{n: n, cmp: func(x, y Job) int { return cmp.Compare(x.ID, y.ID) }}
	for _, j := range t.jobList.items {
		if j != nil && j.id > after && (f.State == 0 || j.state == f.State) && (f.Kind == 0 || j.kind == f.Kind) && (f.Outcome == 0 || j.outcome == f.Outcome) && strings.HasPrefix(j.id, f.Prefix) && f.Labels.Within(j.labels) {
			b.add(j.view())
		}
	}
	for id, j := range t.retired.jobs {
		if id > after && f.Selects(j) {
			b.add(j)
		}
	}
	return b.result()
}

// randomTable folds n jobs, submitted in a random order of ids, through
// random lives: some stay queued, some are acquired, running, reported,
// cancelled; mode says what becomes of those that end.
func randomTable(t testing.TB, rng *rand.Rand, n int, mode RetireMode) *Table {
	tab := New()
	tab.SetRetire(mode)
	apply := func(e event.Event) {
		e.Seq, e.Time = tab.Seq()+1, int64(tab.Seq()+1)
		if err := tab.Apply(&e); err != nil {
			t.Fatal(err)
		}
	}
	pools := []event.Labels{"", event.MustLabels(map[string]string{"pool": "gpu"})}
	for _, i := range rng.Perm(n) {
		id := fmt.Sprintf("%c%04d", 'a'+rune(i%3), i)
		kind := event.KindEvaluation
		if i%5 == 0 {
			kind = event.KindRun
		}
		apply(event.Event{Type: event.TypeQueued, Job: id, Kind: kind, Spec: []byte("{}"), Labels: pools[rng.IntN(2)]})
		switch rng.IntN(5) {
		case 0: // stays queued
		case 1:
			apply(event.Event{Type: event.TypeCancelled, Job: id})
		default:
			apply(event.Event{Type: event.TypeAcquired, Job: id, Worker: "w", Lease: tab.Seq() + 1, Labels: ""})
			lease := tab.Seq()
			if rng.IntN(2) == 0 {
				apply(event.Event{Type: event.TypeRunning, Job: id, Worker: "w", Lease: lease})
			}
			if rng.IntN(2) == 0 {
				apply(event.Event{Type: event.TypeReported, Job: id, Worker: "w", Lease: lease, Outcome: event.Outcome(1 + rng.IntN(2))})
			}
		}
		tab.TakeRetired()
	}
	return tab
}

// TestJobsAfterIndex: a page read from the index is the page a walk of
// every job gives, for every filter, cursor and page size, jobs held and
// jobs retired (RetireKeep), and after a snapshot's restore.
func TestJobsAfterIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 1))
	for _, mode := range []RetireMode{RetireKeep, RetireRecord} {
		tab := randomTable(t, rng, 600, mode)
		restored, err := Restore(tab.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		gpu := event.MustLabels(map[string]string{"pool": "gpu"})
		for _, f := range []JobFilter{
			{}, {State: fsm.Queued}, {State: fsm.Acquired}, {State: fsm.Running}, {State: fsm.Reported},
			{State: fsm.Cancelled}, {Kind: event.KindRun}, {Outcome: event.OutcomeFailed}, {Labels: gpu},
			{Prefix: "b"}, {Prefix: "b01"}, {Prefix: "c0599"}, {Prefix: "z"}, {State: fsm.Queued, Prefix: "a", Labels: gpu},
		} {
			for _, after := range []string{"", "a", "a0300", "b0100", "b0101x", "c", "c0599", "d"} {
				for _, n := range []int{1, 7, 100, 1000} {
					want := tab.jobsAfterScan(f, after, n)
					for name, tb := range map[string]*Table{"folded": tab, "restored": restored} {
						if name == "restored" && mode == RetireKeep {
							continue // a snapshot holds no retired job
						}
						got := tb.JobsAfter(f, after, n)
						if !sameIDs(got, want) {
							t.Fatalf("mode %d, %s, %+v after %q, n %d:\n got %v\nwant %v", mode, name, f, after, n, ids(got), ids(want))
						}
					}
				}
			}
		}
	}
}

func ids(js []Job) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}

func sameIDs(a, b []Job) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].State != b[i].State {
			return false
		}
	}
	return true
}

// queuedTable is a table of n queued jobs, ids in submission order, and
// every tenth job acquired, so that a page of queued jobs skips some.
func queuedTable(tb testing.TB, n int) *Table {
	tab := New()
	tab.SetRetire(RetireRecord)
	e := event.Event{Type: event.TypeQueued, Kind: event.KindEvaluation, Spec: []byte("{}")}
	for i := range n {
		e.Seq, e.Time, e.Type, e.Job = tab.Seq()+1, int64(i), event.TypeQueued, fmt.Sprintf("job-%07d", i)
		if err := tab.Apply(&e); err != nil {
			tb.Fatal(err)
		}
		if i%10 == 0 {
			a := event.Event{Seq: tab.Seq() + 1, Time: int64(i), Type: event.TypeAcquired, Job: e.Job, Worker: "w", Lease: tab.Seq() + 1}
			if err := tab.Apply(&a); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return tab
}

// TestJobsAfterCostsThePage: the first page of 100 queued jobs costs about
// the same with 2,000 jobs held as with 200,000 (a walk of every job costs
// 100 times more). Each is timed as the best of several reads, so that a
// busy machine slows both alike.
func TestJobsAfterCostsThePage(t *testing.T) {
	if testing.Short() {
		t.Skip("folds 200,000 jobs: not in -short")
	}
	best := func(tab *Table) time.Duration {
		d := time.Duration(1 << 62)
		for range 30 {
			start := time.Now()
			if got := tab.JobsAfter(JobFilter{State: fsm.Queued}, "", 100); len(got) != 100 {
				t.Fatalf("page of %d jobs", len(got))
			}
			d = min(d, time.Since(start))
		}
		return d
	}
	small, large := best(queuedTable(t, 2_000)), best(queuedTable(t, 200_000))
	if large > 10*small {
		t.Fatalf("a page of 100 takes %v with 200,000 jobs, %v with 2,000: it grows with the jobs held", large, small)
	}
}

var million = sync.OnceValue(func() *Table { return queuedTable(&testing.B{}, 1_000_000) })

// BenchmarkJobsAfter reads a page of 100 jobs from a table of a million
// (every tenth acquired, the rest queued): before, a walk of every job (as
// JobsAfter was); after, from the index by id.
//
//	go test -run '^$' -bench BenchmarkJobsAfter ./projection
func BenchmarkJobsAfter(b *testing.B) {
	tab := million()
	for _, tc := range []struct {
		name  string
		f     JobFilter
		after string
	}{
		{"first/state=queued", JobFilter{State: fsm.Queued}, ""},
		{"first/state=any", JobFilter{}, ""},
		{"middle/state=queued", JobFilter{State: fsm.Queued}, "job-0500000"},
		{"prefix/state=any", JobFilter{Prefix: "job-09"}, ""},
	} {
		for _, way := range []struct {
			name string
			read func(JobFilter, string, int) []Job
		}{{"before", tab.jobsAfterScan}, {"after", tab.JobsAfter}} {
			b.Run(tc.name+"/"+way.name, func(b *testing.B) {
				for range b.N {
					if got := way.read(tc.f, tc.after, 100); len(got) != 100 {
						b.Fatalf("page of %d jobs", len(got))
					}
				}
			})
		}
	}
}
