package eventlog

import (
	"errors"
	"fmt"
	"github.com/leaselog/leaselog/event"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// randomTimes returns n event times that mostly move forward, in bursts
// within a second, but also step back (a clock change), jump, sit on second
// boundaries, and cross zero: what the time index must not assume away.
func randomTimes(r *rand.Rand, n int) []int64 {
	const sec = int64(1e9)
	t := (r.Int64N(20) - 10) * sec
	out := make([]int64, n)
	for i := range out {
		switch p := r.IntN(100); {
		case p < 55: // the same burst
			t += r.Int64N(sec / 4)
		case p < 75: // the next second or two
			t += r.Int64N(2 * sec)
		case p < 85: // the clock steps back
			t -= r.Int64N(5 * sec)
		case p < 90: // onto a second boundary
			t = t / sec * sec
		case p < 95: // a jump
			t += (r.Int64N(40) - 20) * sec
		default: // exactly zero, which a query cannot name as a bound
			t = 0
		}
		out[i] = t
	}
	return out
}

// randomLog appends n events with randomTimes in batches of random sizes,
// reopening the log now and then (the last run is recovered at Open), and
// returns the open log and what it holds.
func randomLog(t *testing.T, r *rand.Rand, fs vfs.FS, n int) (*Log, []event.Event) {
	t.Helper()
	l, err := Open("data", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	times := randomTimes(r, n)
	var all []event.Event
	for len(all) < n {
		k := min(1+r.IntN(8), n-len(all))
		batch := make([]event.Event, k)
		for i := range batch {
			batch[i] = event.Event{Type: event.Type(1 + r.IntN(3)), Time: times[len(all)+i], Job: fmt.Sprintf("j%d", r.IntN(4))}
		}
		if err := l.Append(batch); err != nil {
			t.Fatal(err)
		}
		all = append(all, batch...)
		if r.IntN(20) == 0 {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if l, err = Open("data", Options{FS: fs}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return l, all
}

// bruteForce answers q by filtering every event, as Query did before the
// time index.
func bruteForce(all []event.Event, q Query) []uint64 {
	var out []uint64
	for _, e := range all {
		if q.Limit > 0 && len(out) >= q.Limit {
			break
		}
		if e.Seq > q.After && (q.Type == 0 || e.Type == q.Type) && (q.Job == "" || e.Job == q.Job) &&
			(q.Since == 0 || e.Time >= q.Since) && (q.Until == 0 || e.Time < q.Until) {
			out = append(out, e.Seq)
		}
	}
	return out
}

func querySeqs(t *testing.T, l *Log, q Query) []uint64 {
	t.Helper()
	it := l.Query(q)
	var out []uint64
	for it.Next() {
		out = append(out, it.Event().Seq)
	}
	if err := it.Close(); err != nil {
		t.Fatalf("%+v: %v", q, err)
	}
	return out
}

// randomQuery picks a query with a time window whose bounds are near the
// log's times: on them, a nanosecond either side, on second boundaries, or
// far away; one bound or both.
func randomQuery(r *rand.Rand, all []event.Event) Query {
	bound := func() int64 {
		t := all[r.IntN(len(all))].Time
		switch r.IntN(6) {
		case 0:
			return 0 // unset
		case 1:
			return t + r.Int64N(3) - 1
		case 2:
			return t / 1e9 * 1e9
		case 3:
			return t + (r.Int64N(7)-3)*1e9
		case 4:
			return (r.Int64N(61) - 30) * 1e9 / 2
		default:
			return t
		}
	}
	q := Query{Since: bound(), Until: bound()}
	if q.Since == 0 && q.Until == 0 {
		q.Until = all[r.IntN(len(all))].Time + 1
	}
	if r.IntN(2) == 0 {
		q.Type = event.Type(1 + r.IntN(3))
	}
	if r.IntN(6) == 0 {
		q.Job = fmt.Sprintf("j%d", r.IntN(4))
	}
	if r.IntN(3) == 0 {
		q.After = uint64(r.IntN(len(all) + 1))
	}
	if r.IntN(3) == 0 {
		q.Limit = 1 + r.IntN(10)
	}
	q.ReadAhead = r.IntN(4) == 0
	return q
}

// TestTimeWindowMatchesBruteForce is the time index's main test: on random
// logs whose clock steps back, every windowed query answers exactly what a
// filter over the whole log answers, with cursors and limits, whether it
// finds its runs by second or by seq, and also when a window holds more runs
// than a query keeps apart.
func TestTimeWindowMatchesBruteForce(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0))
			l, all := randomLog(t, r, vfs.NewMem(), 50+r.IntN(600))
			defer l.Close()
			if !l.timeIndexed {
				t.Fatal("a new store has no time index")
			}
			for i := 0; i < 300; i++ {
				q := randomQuery(r, all)
				if i%50 == 0 {
					defer func(n int) { maxWindowRuns = n }(maxWindowRuns)
					maxWindowRuns = r.IntN(4)
				}
				budget := r.IntN(3) // 0: as built; 1: by second only; 2: by seq only
				setBudget(t, budget)
				if got, want := querySeqs(t, l, q), bruteForce(all, q); !slices.Equal(got, want) {
					t.Fatalf("query %+v (maxWindowRuns %d, budget %d):\n got %v\nwant %v", q, maxWindowRuns, budget, got, want)
				}
			}
		})
	}
}

// setBudget makes queries find runs as built (0), by second only (1), or by
// seq only (2), until the test ends.
func setBudget(t *testing.T, how int) {
	t.Helper()
	orig := clockBudget
	t.Cleanup(func() { clockBudget = orig })
	switch how {
	case 0:
		clockBudget = orig
	case 1:
		clockBudget = func(uint64, uint64) uint64 { return math.MaxUint64 }
	case 2:
		clockBudget = func(uint64, uint64) uint64 { return 0 }
	}
}

// timeIndexKeys returns every key and value of the time index and its marker.
func timeIndexKeys(t *testing.T, l *Log) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, span := range [][2][]byte{{{prefixClock}, {prefixClock + 1}}, {{prefixRun}, {prefixRun + 1}}, {metaTimeIndexKey, prefixEnd(metaTimeIndexKey)}} {
		it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: span[0], UpperBound: span[1]})
		if err != nil {
			t.Fatal(err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			out[string(it.Key())] = string(it.Value())
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// deleteKeys deletes the keys of the time index with seq >= from, and the
// marker if marker is set, as if an older build had written those events.
func deleteKeys(t *testing.T, l *Log, from uint64, marker bool) {
	t.Helper()
	b := l.db.NewBatch()
	for k := range timeIndexKeys(t, l) {
		key := []byte(k)
		switch {
		case key[0] == prefixMeta:
			if !marker {
				continue
			}
		case seqOfIndexKey(key) < from:
			continue
		}
		if err := b.Delete(key, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.db.Apply(b, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

func seqOfIndexKey(key []byte) uint64 {
	seq, _ := seqSuffix(key)
	return seq
}

// TestTimeIndexBackfill simulates stores written by an older build: one with
// no time index at all, and one whose newest events were appended without it
// (a downgrade, then an upgrade). A read-write Open rebuilds exactly the keys
// appends would have written; a read-only Open of a store without the index
// answers from the old path, and answers the same.
func TestTimeIndexBackfill(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	fs := vfs.NewMem()
	l, all := randomLog(t, r, fs, 3000)
	want := timeIndexKeys(t, l)
	queries := make([]Query, 200)
	for i := range queries {
		queries[i] = randomQuery(r, all)
	}
	check := func(l *Log, what string) {
		t.Helper()
		for _, q := range queries {
			if got, want := querySeqs(t, l, q), bruteForce(all, q); !slices.Equal(got, want) {
				t.Fatalf("%s: query %+v:\n got %v\nwant %v", what, q, got, want)
			}
		}
	}
	reopen := func(opts Options) *Log {
		t.Helper()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		opts.FS = fs
		nl, err := Open("data", opts)
		if err != nil {
			t.Fatal(err)
		}
		return nl
	}

	deleteKeys(t, l, 0, true)
	l = reopen(Options{ReadOnly: true})
	if l.timeIndexed {
		t.Fatal("a read-only store without the time index claims one")
	}
	check(l, "read-only, no index")

	l = reopen(Options{})
	if got := timeIndexKeys(t, l); !mapsEqual(got, want) {
		t.Fatalf("backfill wrote %d keys, want the %d that appends wrote", len(got), len(want))
	}
	check(l, "backfilled")

	// Events appended without the index after its middle: the marker stays.
	deleteKeys(t, l, all[len(all)/2].Seq, false)
	l = reopen(Options{ReadOnly: true})
	if l.timeIndexed {
		t.Fatal("a read-only store whose index misses its newest runs claims one")
	}
	check(l, "read-only, index behind")
	l = reopen(Options{})
	if got := timeIndexKeys(t, l); !mapsEqual(got, want) {
		t.Fatalf("after the tail was indexed: %d keys, want %d", len(got), len(want))
	}
	check(l, "tail indexed")

	// And appends carry on from the recovered run.
	more := make([]event.Event, 50)
	for i, tm := range randomTimes(r, len(more)) {
		more[i] = event.Event{Type: event.TypeQueued, Time: tm, Job: "j9"}
	}
	if err := l.Append(more); err != nil {
		t.Fatal(err)
	}
	all = append(all, more...)
	for i := 0; i < 200; i++ {
		q := randomQuery(r, all)
		if got, want := querySeqs(t, l, q), bruteForce(all, q); !slices.Equal(got, want) {
			t.Fatalf("after more appends: query %+v:\n got %v\nwant %v", q, got, want)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestTimeIndexRuns checks the keys themselves on a small log: one pair per
// run, a run per second, a new run when the clock steps back into a second
// seen before, and none for a batch that failed.
func TestTimeIndexRuns(t *testing.T) {
	l, err := Open("data", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const s = int64(1e9)
	times := []int64{5 * s, 5*s + 1, 6 * s, 6*s + s - 1, 5 * s, -1, -1, 0}
	var evs []event.Event
	for _, tm := range times {
		evs = append(evs, event.Event{Type: event.TypeDaemonStarted, Time: tm})
	}
	if err := l.Append(evs); err != nil {
		t.Fatal(err)
	}
	// A batch refused part-way leaves the run where it was.
	bad := []event.Event{{Type: event.TypeDaemonStarted, Time: 9 * s}, {Type: event.TypeDaemonStarted, Time: 9 * s, Job: strings.Repeat("x", MaxIDLen+1)}}
	if err := l.Append(bad); err == nil {
		t.Fatal("append of an oversized job id succeeded")
	}
	if err := l.Append([]event.Event{{Type: event.TypeDaemonStarted, Time: 0}}); err != nil {
		t.Fatal(err)
	}
	var got []string
	keys := timeIndexKeys(t, l)
	for k, v := range keys {
		if k[0] == prefixRun {
			got = append(got, fmt.Sprintf("run seq %d second %d", seqOfIndexKey([]byte(k)), int64(beUint64(v)^(1<<63))))
			if _, ok := keys[string(clockKey(nil, int64(beUint64(v)^(1<<63)), seqOfIndexKey([]byte(k))))]; !ok {
				t.Errorf("run key %q has no clock key", k)
			}
		}
	}
	slices.Sort(got)
	want := []string{"run seq 1 second 5", "run seq 3 second 6", "run seq 5 second 5", "run seq 6 second -1", "run seq 8 second 0"}
	if !slices.Equal(got, want) || len(keys) != 2*len(want)+1 {
		t.Fatalf("runs %q (%d keys), want %q and the marker", got, len(keys), want)
	}
}

func beUint64(s string) uint64 {
	var v uint64
	for i := 0; i < len(s); i++ {
		v = v<<8 | uint64(s[i])
	}
	return v
}

// TestCorruptTimeIndexIsNamed damages the time index and checks that a
// windowed query returns ErrCorrupt naming the key, never a panic or a
// wrong answer.
func TestCorruptTimeIndexIsNamed(t *testing.T) {
	const s = int64(1e9)
	shortClock := appendSecond([]byte{prefixClock}, 1) // a second, no seq
	setup := func(t *testing.T) *Log {
		l, err := Open("data", Options{FS: vfs.NewMem()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		var evs []event.Event
		for i := range 6 {
			evs = append(evs, event.Event{Type: event.TypeQueued, Job: "j", Kind: event.KindRun, Time: int64(i/2) * s})
		}
		if err := l.Append(evs); err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, tc := range []struct {
		name   string
		damage func(l *Log) error
		key    []byte
		qs     []Query
	}{
		{"short clock key", func(l *Log) error { return l.db.Set(shortClock, nil, pebble.Sync) }, shortClock, nil},
		{"clock key naming no run", func(l *Log) error { return l.db.Delete(runKey(nil, 3), pebble.Sync) }, clockKey(nil, 1, 3), nil},
		{"short run key", func(l *Log) error { return l.db.Set([]byte{prefixRun, 0, 0, 0, 0, 0, 0, 0, 3, 0}, nil, pebble.Sync) }, []byte{prefixRun, 0, 0, 0, 0, 0, 0, 0, 3, 0}, nil},
		// A query that follows the log (After) reads the runs by seq.
		{"short run value", func(l *Log) error { return l.db.Set(runKey(nil, 5), []byte{1, 2, 3}, pebble.Sync) }, runKey(nil, 5),
			[]Query{{Type: event.TypeQueued, Since: 1, Until: 3 * s, After: 4}, {Since: 1, After: 5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := setup(t)
			if err := tc.damage(l); err != nil {
				t.Fatal(err)
			}
			qs := tc.qs
			if qs == nil {
				qs = []Query{{Type: event.TypeQueued, Since: 1, Until: 2 * s}, {Since: 1, Until: 2 * s}}
			}
			for _, q := range qs {
				it := l.Query(q)
				for it.Next() {
				}
				err := it.Close()
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.key)) {
					t.Fatalf("query %+v: %v; want ErrCorrupt naming key %q", q, err, tc.key)
				}
			}
		})
	}
	t.Run("run key past the last event", func(t *testing.T) {
		fs := vfs.NewMem()
		l, err := Open("data", Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Append([]event.Event{{Type: event.TypeDaemonStarted, Time: s}}); err != nil {
			t.Fatal(err)
		}
		b := l.db.NewBatch()
		if _, err := addRun(b, nil, 9, 40); err != nil {
			t.Fatal(err)
		}
		if err := l.db.Apply(b, pebble.Sync); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		_, err = Open("data", Options{FS: fs})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("%q", runKey(nil, 40))) {
			t.Fatalf("open: %v; want ErrCorrupt naming key %q", err, runKey(nil, 40))
		}
	})
}
