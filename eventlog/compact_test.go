package eventlog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leaselog/leaselog/event"
)

// leaseWork is a log of jobs whose leases heartbeat as a busy daemon's do:
// a few jobs at once, each queued, acquired, running, heartbeating (a
// worker's heartbeats of all its leases in one batch), reported; the times
// those of randomTimes, clock steps included; and snapshots now and then.
type leaseWork struct {
	all  []event.Event
	ends map[string]uint64 // job -> the seq that ended it
	jobs []string          // in the order they ended
}

func leaseLog(t *testing.T, r *rand.Rand, l *Log, n int) leaseWork {
	t.Helper()
	type job struct {
		id, worker  string
		lease       uint64
		step, beats int
		want        int
	}
	w := leaseWork{ends: map[string]uint64{}}
	times := randomTimes(r, 40*n)
	now := func() int64 {
		if len(w.all) < len(times) {
			return times[len(w.all)]
		}
		return times[len(times)-1] + int64(len(w.all))
	}
	var live []*job
	started := 0
	appendBatch := func(evs []event.Event) {
		for i := range evs {
			evs[i].Time = now() + int64(i)
		}
		if err := l.Append(evs); err != nil {
			t.Fatal(err)
		}
		w.all = append(w.all, evs...)
		if r.IntN(25) == 0 {
			if err := l.PutSnapshot(l.LastSeq(), []byte("table")); err != nil {
				t.Fatal(err)
			}
		}
	}
	for started < n || len(live) > 0 {
		switch a := r.IntN(4); {
		case a == 0 && started < n && len(live) < 5:
			j := &job{id: fmt.Sprintf("j%d", started), worker: fmt.Sprintf("w%d", r.IntN(3)), want: r.IntN(14)}
			started++
			live = append(live, j)
			appendBatch([]event.Event{{Type: event.TypeQueued, Job: j.id, Kind: event.KindRun}})
		case a == 1 && len(live) > 0:
			i := r.IntN(len(live))
			j := live[i]
			switch {
			case j.step == 0:
				evs := []event.Event{{Type: event.TypeAcquired, Job: j.id, Worker: j.worker}}
				appendBatch(evs)
				j.lease, j.step = evs[0].Lease, 1
			case j.step == 1:
				appendBatch([]event.Event{{Type: event.TypeRunning, Job: j.id, Lease: j.lease, Worker: j.worker}})
				j.step = 2
			case j.beats >= j.want:
				evs := []event.Event{{Type: event.TypeReported, Job: j.id, Lease: j.lease, Worker: j.worker, Outcome: event.OutcomeSucceeded}}
				appendBatch(evs)
				w.ends[j.id] = evs[0].Seq
				w.jobs = append(w.jobs, j.id)
				live = slices.Delete(live, i, i+1)
			}
		case len(live) > 0:
			worker := live[r.IntN(len(live))].worker
			var evs []event.Event
			var who []*job
			for _, j := range live {
				if j.worker == worker && j.step == 2 && j.beats < j.want {
					e := event.Event{Type: event.TypeHeartbeat, Job: j.id, Lease: j.lease, Worker: j.worker}
					if r.IntN(3) == 0 { // progress, now and then
						e.Details = fmt.Appendf(nil, `{"beat":%d}`, j.beats)
					}
					evs = append(evs, e)
					who = append(who, j)
				}
			}
			if len(evs) > 0 {
				appendBatch(evs)
				for _, j := range who {
					j.beats++
				}
			}
		}
	}
	return w
}

// compactOracle is what the log must hold once the jobs in done are
// compacted with summaries of at most max heartbeats: each lease's
// heartbeats cut into runs of max, each run of two or more its last made a
// summary, the others gone.
func compactOracle(all []event.Event, done map[string]bool, max int) []event.Event {
	byLease := map[uint64][]event.Event{}
	var leases []uint64
	for _, e := range all {
		if e.Type == event.TypeHeartbeat && done[e.Job] {
			if byLease[e.Lease] == nil {
				leases = append(leases, e.Lease)
			}
			byLease[e.Lease] = append(byLease[e.Lease], e)
		}
	}
	gone := map[uint64]bool{}
	sums := map[uint64]event.Beats{}
	details := map[uint64][]byte{}
	for _, id := range leases {
		for hs := range slices.Chunk(byLease[id], max) {
			if len(hs) < 2 {
				continue
			}
			b := event.Beats{Count: uint64(len(hs)), FirstSeq: hs[0].Seq, FirstTime: hs[0].Time}
			for _, h := range hs[:len(hs)-1] {
				gone[h.Seq] = true
				b.Claim += event.ClaimOf(h.Seq)
			}
			sums[hs[len(hs)-1].Seq] = b
			// The summary keeps the latest details of those it stands for.
			for _, h := range hs {
				if h.Details != nil {
					details[hs[len(hs)-1].Seq] = h.Details
				}
			}
		}
	}
	var out []event.Event
	for _, e := range all {
		if gone[e.Seq] {
			continue
		}
		if b, ok := sums[e.Seq]; ok {
			e.Type, e.Beats, e.Details = event.TypeHeartbeats, b, details[e.Seq]
		}
		out = append(out, e)
	}
	return out
}

// checkCompacted holds l to want, the events it must hold: a scan from the
// start and from every seq, with and without read-ahead (the gaps it
// reports are the seqs missing), the job, worker and type indexes, the time
// index and windows of time.
func checkCompacted(t *testing.T, r *rand.Rand, l *Log, want []event.Event) {
	t.Helper()
	got := collectAll(t, l.Query(Query{ReadAhead: true}))
	if !reflect.DeepEqual(got, want) {
		for i := range min(len(got), len(want)) {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("event %d of %d:\n got %s %+v\nwant %s %+v", i, len(want), got[i].String(), got[i].Beats, want[i].String(), want[i].Beats)
			}
		}
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	last := want[len(want)-1].Seq
	for from := uint64(1); from <= last+1; from++ {
		it := l.Iter(from)
		var seqs []uint64
		prev := from - 1
		for it.Next() {
			e := it.Event()
			first, end, ok := it.Compacted()
			if gap := e.Seq != prev+1; gap != ok || ok && (first != prev+1 || end != e.Seq-1) {
				t.Fatalf("from %d: seq %d after %d reported gap %d..%d (%v)", from, e.Seq, prev, first, end, ok)
			}
			prev = e.Seq
			seqs = append(seqs, e.Seq)
		}
		if err := it.Close(); err != nil {
			t.Fatalf("scan from seq %d: %v", from, err)
		}
		if w := bruteForce(want, Query{After: from - 1}); !slices.Equal(seqs, w) {
			t.Fatalf("scan from seq %d: %v, want %v", from, seqs, w)
		}
	}
	for _, q := range []Query{{Job: "j1"}, {Job: "j2", After: 5}, {Worker: "w0"}, {Worker: "w2"},
		{Type: event.TypeHeartbeat}, {Type: event.TypeHeartbeats}, {Type: event.TypeReported}} {
		if got, w := querySeqs(t, l, q), bruteWorker(want, q); !slices.Equal(got, w) {
			t.Fatalf("%+v: %v, want %v", q, got, w)
		}
	}
	if err := l.CheckTimeIndex(); err != nil {
		t.Fatal(err)
	}
	for range 200 {
		q := randomQuery(r, want)
		if r.IntN(3) == 0 {
			q.Type = []event.Type{event.TypeHeartbeat, event.TypeHeartbeats, event.TypeQueued}[r.IntN(3)]
		}
		if got, w := querySeqs(t, l, q), bruteForce(want, q); !slices.Equal(got, w) {
			t.Fatalf("%+v: %v, want %v", q, got, w)
		}
	}
}

func collectAll(t *testing.T, it *Iter) []event.Event {
	t.Helper()
	var out []event.Event
	for it.Next() {
		out = append(out, it.Event().Clone())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// bruteWorker is bruteForce, with the worker filter too.
func bruteWorker(all []event.Event, q Query) []uint64 {
	var keep []event.Event
	for _, e := range all {
		if q.Worker == "" || e.Worker == q.Worker {
			keep = append(keep, e)
		}
	}
	return bruteForce(keep, Query{Type: q.Type, Job: q.Job, After: q.After})
}

// TestCompactJob compacts the jobs of random logs one by one, in the order
// they ended or another, some twice, with summaries of at most 1, 3 or
// 4096 heartbeats, and holds the log to what it must hold after each, and
// after a reopen.
func TestCompactJob(t *testing.T) {
	for seed := range uint64(6) {
		for _, max := range []int{1, 3, DefaultSegmentHeartbeats} {
			t.Run(fmt.Sprintf("seed=%d/max=%d", seed, max), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 11))
				fs := vfs.NewMem()
				opts := Options{FS: fs, SegmentHeartbeats: max}
				l, err := Open("data", opts)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { l.Close() }()
				w := leaseLog(t, r, l, 12)
				order := slices.Clone(w.jobs)
				if seed%2 == 1 {
					r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				}
				done := map[string]bool{}
				var total CompactStats
				for i, job := range order {
					st, err := l.CompactJob(job, w.ends[job])
					if err != nil {
						t.Fatal(err)
					}
					total.Add(st)
					done[job] = true
					if i%4 == 0 {
						again, err := l.CompactJob(job, w.ends[job])
						if err != nil || again != (CompactStats{}) {
							t.Fatalf("job %s compacted again: %+v, %v; want nothing done", job, again, err)
						}
					}
					checkCompacted(t, r, l, compactOracle(w.all, done, max))
				}
				want := compactOracle(w.all, done, max)
				if total.Heartbeats != len(w.all)-len(want) {
					t.Errorf("stats say %d heartbeats removed, the log has %d fewer events", total.Heartbeats, len(w.all)-len(want))
				}
				if wantFormat := archiveFormat; total.Summaries > 0 {
					wantFormat = compactedFormat
					if l.Format() != wantFormat {
						t.Errorf("format %d after a compaction, want %d", l.Format(), wantFormat)
					}
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				if l, err = Open("data", opts); err != nil {
					t.Fatal(err)
				}
				checkCompacted(t, r, l, want)
				if err := l.Append([]event.Event{{Type: event.TypeDaemonStopping, Time: want[len(want)-1].Time}}); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestCompactDeletesSnapshotsInASummary: a snapshot taken between the first
// heartbeat a summary stands for and its last is deleted with them (the
// compacted log no longer folds to it); the others stay.
func TestCompactDeletesSnapshotsInASummary(t *testing.T) {
	l, err := Open("data", Options{FS: vfs.NewMem(), KeepSnapshots: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	appendOne := func(e event.Event) uint64 {
		t.Helper()
		evs := []event.Event{e}
		if err := l.Append(evs); err != nil {
			t.Fatal(err)
		}
		return evs[0].Seq
	}
	snap := func() uint64 {
		t.Helper()
		seq := l.LastSeq()
		if err := l.PutSnapshot(seq, []byte("table")); err != nil {
			t.Fatal(err)
		}
		return seq
	}
	appendOne(event.Event{Type: event.TypeQueued, Job: "j", Kind: event.KindRun, Time: 1e9})
	lease := appendOne(event.Event{Type: event.TypeAcquired, Job: "j", Worker: "w", Time: 2e9})
	before := snap()
	beat := func() uint64 {
		return appendOne(event.Event{Type: event.TypeHeartbeat, Job: "j", Lease: lease, Worker: "w", Time: 3e9})
	}
	beat()
	inside := snap() // at a heartbeat that goes
	beat()
	appendOne(event.Event{Type: event.TypeDaemonStopping, Time: 4e9})
	between := snap()
	last := beat()
	atLast := snap() // at the summary itself: it folds as the heartbeat was
	end := appendOne(event.Event{Type: event.TypeReported, Job: "j", Lease: lease, Worker: "w", Outcome: event.OutcomeSucceeded, Time: 5e9})
	after := snap()
	st, err := l.CompactJob("j", end)
	if err != nil {
		t.Fatal(err)
	}
	if st.Snapshots != 2 || st.Summaries != 1 || st.Heartbeats != 2 {
		t.Fatalf("stats %+v, want 1 summary of 3 heartbeats, 2 snapshots removed", st)
	}
	got, err := l.Snapshots()
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{after, atLast, before}; !slices.Equal(got, want) {
		t.Fatalf("snapshots %v, want %v (%d and %d inside the summary's heartbeats %d..%d)", got, want, inside, between, inside, last)
	}
	// The list the log keeps is the store's.
	if stored, err := l.listSnapshots(); err != nil || !slices.Equal(stored, got) {
		t.Fatalf("the store holds snapshots %v (%v), the log lists %v", stored, err, got)
	}
}

// TestCompactedCorruptionIsNamed: a seq missing that no compaction removed,
// or a run of compacted seqs that does not match the gap a scan meets, is
// corruption named by the seqs.
func TestCompactedCorruptionIsNamed(t *testing.T) {
	for _, tc := range []struct {
		name string
		hurt func(t *testing.T, l *Log, lost uint64) error
		want func(lost uint64) string // a regexp of what the error says
	}{
		{"an event deleted", func(t *testing.T, l *Log, lost uint64) error {
			return l.db.Delete(eventKey(nil, lost), pebble.Sync)
		}, func(lost uint64) string {
			// The gap starts at it: alone ("seq N missing"), or with
			// compacted seqs after it ("seqs N..M missing").
			return fmt.Sprintf(`seqs? %d(\.\.[0-9]+)? missing from the log, and no compaction removed them`, lost)
		}},
		{"a run cut short", func(t *testing.T, l *Log, lost uint64) error {
			var first, last uint64
			if err := l.ScanCompacted(func(f, la uint64) error {
				if la > f && first == 0 {
					first, last = f, la
				}
				return nil
			}); err != nil || first == 0 {
				t.Fatalf("no run of two seqs: %v", err)
			}
			return l.db.Set(gapKey(nil, first), eventKey(nil, last-1)[1:], pebble.Sync)
		}, func(uint64) string { return "missing from the log, and no compaction removed them" }},
		{"a run of bad bytes", func(t *testing.T, l *Log, lost uint64) error {
			var first uint64
			if err := l.ScanCompacted(func(f, _ uint64) error {
				first = f
				return errors.New("stop")
			}); first == 0 {
				t.Fatalf("no run: %v", err)
			}
			return l.db.Set(gapKey(nil, first), []byte{1, 2}, pebble.Sync)
		}, func(uint64) string { return "compaction key" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 7))
			l, err := Open("data", Options{FS: vfs.NewMem()})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			w := leaseLog(t, r, l, 12)
			for _, job := range w.jobs {
				if _, err := l.CompactJob(job, w.ends[job]); err != nil {
					t.Fatal(err)
				}
			}
			lost := w.ends[w.jobs[len(w.jobs)/2]] // a reported event, which no compaction removes
			if err := tc.hurt(t, l, lost); err != nil {
				t.Fatal(err)
			}
			want := tc.want(lost)
			for _, ahead := range []bool{false, true} {
				it := l.Query(Query{ReadAhead: ahead})
				for it.Next() {
				}
				if err := it.Close(); !errors.Is(err, ErrCorrupt) || !regexp.MustCompile(want).MatchString(err.Error()) {
					t.Fatalf("read-ahead %v: %v, want ErrCorrupt saying %q", ahead, err, want)
				}
			}
		})
	}
}

// TestCompactionCrash crashes the process after each batch of a compaction
// (every batch is synced: what it wrote is all there or not at all), opens
// the crash image and compacts it again: the log passes every check after
// the crash, and ends as a compaction without a crash leaves it.
func TestCompactionCrash(t *testing.T) {
	const max = 3
	r := rand.New(rand.NewPCG(5, 5))
	fs := vfs.NewCrashableMem()
	opts := Options{FS: fs, SegmentHeartbeats: max}
	l, err := Open("data", opts)
	if err != nil {
		t.Fatal(err)
	}
	w := leaseLog(t, r, l, 10)
	var images []*vfs.MemFS
	l.compacted = func() {
		images = append(images, fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(1, uint64(len(images))))}))
	}
	done := map[string]bool{}
	for _, job := range w.jobs {
		if _, err := l.CompactJob(job, w.ends[job]); err != nil {
			t.Fatal(err)
		}
		done[job] = true
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	want := compactOracle(w.all, done, max)
	if len(images) < 10 {
		t.Fatalf("%d crash points: the log has too few heartbeats to test", len(images))
	}
	for i, img := range images {
		l, err := Open("data", Options{FS: img, SegmentHeartbeats: max})
		if err != nil {
			t.Fatalf("crash after batch %d: open: %v", i, err)
		}
		checkScan(t, l)
		for _, job := range w.jobs {
			if _, err := l.CompactJob(job, w.ends[job]); err != nil {
				t.Fatalf("crash after batch %d: compact %s again: %v", i, job, err)
			}
		}
		checkCompacted(t, r, l, want)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// checkScan reads the whole log and its time index, which must pass.
func checkScan(t *testing.T, l *Log) {
	t.Helper()
	it := l.Iter(1)
	for it.Next() {
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckTimeIndex(); err != nil {
		t.Fatal(err)
	}
}

// TestCompactedCursor: the cursor reads back as set, across a reopen.
func TestCompactedCursor(t *testing.T) {
	fs := vfs.NewMem()
	l := openForTest(t, fs)
	if c, err := l.Compacted(); c != 0 || err != nil {
		t.Fatalf("cursor of a new store: %d, %v", c, err)
	}
	if err := l.SetCompacted(42); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openForTest(t, fs)
	defer l.Close()
	if c, err := l.Compacted(); c != 42 || err != nil {
		t.Fatalf("cursor %d, %v; want 42", c, err)
	}
}

func openForTest(t *testing.T, fs vfs.FS) *Log {
	t.Helper()
	l, err := Open("data", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestCheckpointRoundTrip: a checkpoint of a compacted log, loaded into an
// empty store batch by batch, gives the same events, the same runs of
// compacted seqs and a time index that checks; what is appended after the
// checkpoint was taken is not in it.
func TestCheckpointRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	l, err := Open("data", Options{FS: vfs.NewMem(), SegmentHeartbeats: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	w := leaseLog(t, r, l, 12)
	done := map[string]bool{}
	for _, job := range w.jobs[:8] {
		if _, err := l.CompactJob(job, w.ends[job]); err != nil {
			t.Fatal(err)
		}
		done[job] = true
	}
	if err := l.SetCompacted(w.ends[w.jobs[7]]); err != nil {
		t.Fatal(err)
	}
	want := compactOracle(w.all, done, 3)
	c, err := l.Image(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := l.Append([]event.Event{{Type: event.TypeDaemonStopping, Time: 1}}); err != nil { // after the checkpoint
		t.Fatal(err)
	}
	if c.Last != want[len(want)-1].Seq || c.Compacted != w.ends[w.jobs[7]] {
		t.Fatalf("checkpoint at seq %d, cursor %d; want %d, %d", c.Last, c.Compacted, want[len(want)-1].Seq, w.ends[w.jobs[7]])
	}
	into, err := Open("copy", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer into.Close()
	var evs []event.Event
	var gaps []Compacted
	flush := func() {
		if len(evs) == 0 {
			return
		}
		if _, err := into.StageImport(nil, nil, nil); err == nil {
			t.Fatal("an import of no events was taken")
		}
		cm, err := into.StageImportCompacted(evs, gaps, nil, []byte("m"))
		if err != nil {
			t.Fatal(err)
		}
		if err := cm.Wait(); err != nil {
			t.Fatal(err)
		}
		evs, gaps = evs[:0], gaps[:0]
	}
	err = c.Events(func(e *event.Event, gap Compacted, ok bool) error {
		if ok {
			gaps = append(gaps, gap)
		}
		evs = append(evs, e.Clone())
		if len(evs) == 1+r.IntN(7) {
			flush()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	flush()
	checkCompacted(t, r, into, want)
	var a, b []Compacted
	for _, x := range []struct {
		l   *Log
		out *[]Compacted
	}{{l, &a}, {into, &b}} {
		if err := x.l.ScanCompacted(func(first, last uint64) error {
			*x.out = append(*x.out, Compacted{first, last})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(a, b) || len(a) == 0 {
		t.Fatalf("runs of compacted seqs: %v in the log, %v loaded", a, b)
	}
	if into.Format() != compactedFormat {
		t.Fatalf("loaded store of format %d", into.Format())
	}
}
