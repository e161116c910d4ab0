package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
)

func openMem(t testing.TB, fs vfs.FS) *eventlog.Log {
	t.Helper()
	l, err := eventlog.Open("data", eventlog.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func collect(t testing.TB, it *eventlog.Iter) []event.Event {
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

func seqs(evs []event.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

func TestAppendAssignsGapFreeSeqs(t *testing.T) {
	l := openMem(t, vfs.NewMem())
	defer l.Close()
	batch := []event.Event{
		{Type: event.TypeQueued, Job: "j1", Kind: event.KindRun},
		{Type: event.TypeAcquired, Job: "j1", Worker: "w1"},
	}
	if err := l.Append(batch); err != nil {
		t.Fatal(err)
	}
	if batch[0].Seq != 1 || batch[1].Seq != 2 || batch[1].Lease != 2 {
		t.Fatalf("seqs %d,%d lease %d; want 1,2 lease 2 (an acquired event's lease is its seq)", batch[0].Seq, batch[1].Seq, batch[1].Lease)
	}
	if err := l.Append([]event.Event{{Type: event.TypeRunning, Job: "j1", Lease: 2, Worker: "w1"}}); err != nil {
		t.Fatal(err)
	}
	got := collect(t, l.Iter(1))
	if !slices.Equal(seqs(got), []uint64{1, 2, 3}) {
		t.Fatalf("seqs %v", seqs(got))
	}
	if got[1].Lease != 2 || got[1].Worker != "w1" {
		t.Errorf("acquired read back as %+v", got[1])
	}
	if l.LastSeq() != 3 || l.DurableSeq() != 3 {
		t.Errorf("LastSeq %d DurableSeq %d, want 3 3", l.LastSeq(), l.DurableSeq())
	}
}

// TestConcurrentAppendersKeepOrder has many goroutines append at once; the log
// must hold every event exactly once, in gap-free order, and each appender's
// own events in the order it appended them.
func TestConcurrentAppendersKeepOrder(t *testing.T) {
	l := openMem(t, vfs.NewMem())
	defer l.Close()
	const writers, each = 16, 50
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				ev := []event.Event{{Type: event.TypeHeartbeat, Job: fmt.Sprintf("j%d", w), Worker: fmt.Sprintf("w%d", w), Lease: uint64(i + 1)}}
				if err := l.Append(ev); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	all := collect(t, l.Iter(1))
	if len(all) != writers*each {
		t.Fatalf("%d events, want %d", len(all), writers*each)
	}
	last := map[string]uint64{}
	for i, e := range all {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
		if e.Lease != last[e.Worker]+1 {
			t.Fatalf("worker %s: event %d after %d", e.Worker, e.Lease, last[e.Worker])
		}
		last[e.Worker] = e.Lease
	}
}

func TestOnCommitSeesEveryCommit(t *testing.T) {
	var mu sync.Mutex
	var seen []time.Duration
	l, err := eventlog.Open("data", eventlog.Options{FS: vfs.NewMem(), OnCommit: func(d time.Duration) {
		mu.Lock()
		seen = append(seen, d)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := 0; i < 3; i++ {
		if err := l.Append([]event.Event{{Type: event.TypeDaemonStarted}}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 {
		t.Fatalf("OnCommit called %d times for 3 commits", len(seen))
	}
}

func TestStagedEventsInvisibleToIteratorsUntilDurable(t *testing.T) {
	l := openMem(t, vfs.NewMem())
	defer l.Close()
	c, err := l.Stage([]event.Event{{Type: event.TypeDaemonStarted}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := collect(t, l.Iter(1))
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	after := collect(t, l.Iter(1))
	// Durability may be reached before Wait returns (the WAL syncs on its own),
	// but an iterator never sees past the durable mark it was created with.
	if len(before) > 1 || len(after) != 1 {
		t.Fatalf("before Wait %d events, after %d; want <=1 then 1", len(before), len(after))
	}
	if err := l.WaitDurable(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
}

// A reader whose context ends before its event is durable gets an error that
// says so: errors.Is matches the context's own error, and the message names
// the sequence number it waited for.
func TestWaitDurableContextEnds(t *testing.T) {
	l := openMem(t, vfs.NewMem())
	defer l.Close()
	seq := l.LastSeq() + 1 // never appended: only the context can end the wait
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Unix(0, 0))
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			err := l.WaitDurable(ctx, seq)
			if !errors.Is(err, tc.want) {
				t.Fatalf("WaitDurable(%d) with its context ended: %v, want %v", seq, err, tc.want)
			}
			if !strings.Contains(err.Error(), fmt.Sprint(seq)) {
				t.Errorf("WaitDurable's error %q does not name seq %d", err, seq)
			}
		})
	}
}

func TestQueryUsesIndexes(t *testing.T) {
	l := openMem(t, vfs.NewMem())
	defer l.Close()
	evs := []event.Event{
		{Type: event.TypeQueued, Job: "a", Kind: event.KindRun},
		{Type: event.TypeQueued, Job: "ab", Kind: event.KindRun}, // "a" must not match "ab"
		{Type: event.TypeAcquired, Job: "a", Worker: "w1"},
		{Type: event.TypeAcquired, Job: "ab", Worker: "w2"},
		{Type: event.TypeStaleReport, Job: "a", Lease: 3, Worker: "w1", Time: 100},
		{Type: event.TypeStaleReport, Job: "ab", Lease: 4, Worker: "w2", Time: 200},
		{Type: event.TypeStaleReport, Job: "a", Lease: 3, Worker: "w1", Time: 300},
	}
	if err := l.Append(evs); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		q    eventlog.Query
		want []uint64
	}{
		{eventlog.Query{Job: "a"}, []uint64{1, 3, 5, 7}},
		{eventlog.Query{Job: "ab"}, []uint64{2, 4, 6}},
		{eventlog.Query{Worker: "w2"}, []uint64{4, 6}},
		{eventlog.Query{Type: event.TypeStaleReport}, []uint64{5, 6, 7}},
		{eventlog.Query{Type: event.TypeStaleReport, Job: "a"}, []uint64{5, 7}},
		{eventlog.Query{Type: event.TypeStaleReport, Worker: "w1", After: 5}, []uint64{7}},
		{eventlog.Query{Type: event.TypeStaleReport, Since: 150, Until: 300}, []uint64{6}},
		{eventlog.Query{Limit: 2, After: 1}, []uint64{2, 3}},
		{eventlog.Query{Job: "nobody"}, nil},
	} {
		if got := seqs(collect(t, l.Query(tc.q))); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: got %v, want %v", tc.q, got, tc.want)
		}
	}
}

func TestAppendRefusesWhatWouldCorruptTheKeyspace(t *testing.T) {
	l := openMem(t, vfs.NewMem())
	defer l.Close()
	for _, e := range []event.Event{
		{Type: 0},
		{Type: 200},
		{Type: event.TypeQueued, Job: "a\x00b"},
		{Type: event.TypeQueued, Worker: strings.Repeat("w", eventlog.MaxIDLen+1)},
		{Type: event.TypeHeartbeats, Job: "j", Lease: 1, Worker: "w", Beats: event.Beats{Count: 2, FirstSeq: 1}}, // a compaction's, in place
	} {
		if err := l.Append([]event.Event{e}); err == nil {
			t.Errorf("Append(%+v) succeeded", e)
		}
	}
	if l.LastSeq() != 0 {
		t.Fatalf("refused appends consumed seqs: last %d", l.LastSeq())
	}
}

func TestReopenContinuesTheSequence(t *testing.T) {
	fs := vfs.NewMem()
	l := openMem(t, fs)
	if err := l.Append([]event.Event{{Type: event.TypeDaemonStarted}, {Type: event.TypeDaemonStopping}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]event.Event{{Type: event.TypeDaemonStarted}}); !errors.Is(err, eventlog.ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if _, err := l.Get(1); !errors.Is(err, eventlog.ErrClosed) {
		t.Fatalf("get after close: %v", err)
	}
	l = openMem(t, fs)
	defer l.Close()
	e := []event.Event{{Type: event.TypeDaemonStarted}}
	if err := l.Append(e); err != nil {
		t.Fatal(err)
	}
	if e[0].Seq != 3 {
		t.Fatalf("seq after reopen %d, want 3", e[0].Seq)
	}
	got, err := l.Get(2)
	if err != nil || got.Type != event.TypeDaemonStopping {
		t.Fatalf("Get(2) = %+v, %v", got, err)
	}
	if _, err := l.Get(9); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("Get(9): %v", err)
	}
}

func TestSecondOpenIsRefused(t *testing.T) {
	dir := t.TempDir()
	l, err := eventlog.Open(dir, eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := eventlog.Open(dir, eventlog.Options{}); !errors.Is(err, eventlog.ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
}

func TestSnapshots(t *testing.T) {
	l, err := eventlog.Open("data", eventlog.Options{FS: vfs.NewMem(), KeepSnapshots: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := 0; i < 4; i++ {
		if err := l.Append([]event.Event{{Type: event.TypeDaemonStarted}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.PutSnapshot(9, []byte("x")); err == nil {
		t.Fatal("snapshot past the durable seq accepted")
	}
	for seq := uint64(1); seq <= 4; seq++ {
		if err := l.PutSnapshot(seq, []byte(fmt.Sprint("table@", seq))); err != nil {
			t.Fatal(err)
		}
	}
	have, err := l.Snapshots()
	if err != nil || !slices.Equal(have, []uint64{4, 3}) {
		t.Fatalf("Snapshots() = %v, %v; want [4 3]", have, err)
	}
	b, err := l.Snapshot(4)
	if err != nil || string(b) != "table@4" {
		t.Fatalf("Snapshot(4) = %q, %v", b, err)
	}
	if _, err := l.Snapshot(1); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("Snapshot(1) after pruning: %v", err)
	}
	// The walk reads them newest first, and stops where it is told to.
	for _, stop := range []int{1, 2} {
		var read []string
		err := l.EachSnapshot(func(seq uint64, data []byte, err error) bool {
			read = append(read, fmt.Sprint(seq, "=", string(data), err))
			return len(read) < stop
		})
		if want := []string{"4=table@4<nil>", "3=table@3<nil>"}[:stop]; err != nil || !slices.Equal(read, want) {
			t.Fatalf("EachSnapshot stopping after %d read %q, %v; want %q", stop, read, err, want)
		}
	}
}

func TestNewestWalksATypeBackwards(t *testing.T) {
	l := openMem(t, vfs.NewMem())
	defer l.Close()
	if err := l.Append([]event.Event{
		{Type: event.TypeQueued, Job: "a", Kind: event.KindRun},
		{Type: event.TypeAcquired, Job: "a", Worker: "w1"},
		{Type: event.TypeQueued, Job: "b", Kind: event.KindRun},
		{Type: event.TypeQueued, Job: "c", Kind: event.KindRun},
		{Type: event.TypeAcquired, Job: "b", Worker: "w1"},
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		typ    event.Type
		before uint64
		stop   int // stop after this many; 0: never
		want   []uint64
	}{
		{event.TypeQueued, 0, 0, []uint64{4, 3, 1}},
		{event.TypeQueued, 4, 0, []uint64{3, 1}},
		{event.TypeQueued, 3, 0, []uint64{1}},
		{event.TypeQueued, 1, 0, nil},
		{event.TypeQueued, 0, 2, []uint64{4, 3}},
		{event.TypeAcquired, 0, 0, []uint64{5, 2}},
		{event.TypeQueued, 1000, 0, []uint64{4, 3, 1}},
		{event.TypeExpired, 0, 0, nil},
	} {
		var got []uint64
		err := l.Newest(tc.typ, tc.before, func(seq uint64) bool {
			got = append(got, seq)
			return tc.stop == 0 || len(got) < tc.stop
		})
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Newest(%s, before %d, stop %d): %v, %v; want %v", tc.typ, tc.before, tc.stop, got, err, tc.want)
		}
	}
}
