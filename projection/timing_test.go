package projection_test

import (
	"fmt"
	"testing"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/projection"
)

// TestSilentByOwnToleration: a lease granted with a timing of its own
// expires at its own toleration, not the daemon's, and the sweeper lists the
// silent ones by deadline, whatever list each sits in; a snapshot keeps it so.
func TestSilentByOwnToleration(t *testing.T) {
	f := &folder{t: t, tab: projection.New()}
	f.apply(
		event.Event{Type: event.TypeQueued, Time: 0, Job: "a", Kind: event.KindRun},
		event.Event{Type: event.TypeQueued, Time: 0, Job: "b", Kind: event.KindRun, Timing: ownTiming(2, 5, 60)},
		event.Event{Type: event.TypeQueued, Time: 0, Job: "c", Kind: event.KindRun, Timing: ownTiming(2, 5, 60)},
		event.Event{Type: event.TypeQueued, Time: 0, Job: "d", Kind: event.KindRun, Timing: ownTiming(2, 5, 100)},
		event.Event{Type: event.TypeAcquired, Time: 0, Job: "a", Worker: "w"},                               // lease 5
		event.Event{Type: event.TypeAcquired, Time: 0, Job: "d", Worker: "w", Timing: ownTiming(2, 5, 100)}, // lease 6
		event.Event{Type: event.TypeAcquired, Time: 0, Job: "b", Worker: "w", Timing: ownTiming(2, 5, 60)},  // lease 7
		event.Event{Type: event.TypeAcquired, Time: 10, Job: "c", Worker: "w", Timing: ownTiming(2, 5, 60)}, // lease 8
	)
	silent := func(tab *projection.Table, now int64) string {
		ls, _ := tab.Silent(now, 1000, 300)
		ids := []uint64{}
		for _, l := range ls {
			ids = append(ids, l.ID)
		}
		return fmt.Sprint(ids)
	}
	for _, tc := range []struct {
		now  int64
		want string
	}{
		{60, "[]"},
		{61, "[7]"},
		{71, "[7 8]"},
		{101, "[7 8 6]"},
		{301, "[7 8 6 5]"},
	} {
		if got := silent(f.tab, tc.now); got != tc.want {
			t.Errorf("silent at %d: %s, want %s", tc.now, got, tc.want)
		}
	}
	// Heard from at 50, lease 7 expires at 110: after lease 6's deadline.
	f.apply(event.Event{Type: event.TypeHeartbeat, Time: 50, Job: "b", Lease: 7, Worker: "w"})
	restored, err := projection.Restore(f.tab.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	for _, tab := range []*projection.Table{f.tab, restored} {
		if got, want := silent(tab, 111), "[8 6 7]"; got != want {
			t.Errorf("silent at 111: %s, want %s", got, want)
		}
	}
	// An ended lease leaves its list; a list left empty goes.
	f.apply(event.Event{Type: event.TypeReported, Time: 60, Job: "d", Lease: 6, Worker: "w", Outcome: event.OutcomeSucceeded})
	if got, want := silent(f.tab, 301), "[8 7 5]"; got != want {
		t.Errorf("silent at 301 after lease 6's report: %s, want %s", got, want)
	}
}

// TestTimingAndDetailsRefused: the fold refuses a timing that does not hold
// together and details past their bound or on anything but a heartbeat.
func TestTimingAndDetailsRefused(t *testing.T) {
	big := make([]byte, event.MaxDetailsLen+1)
	for _, tc := range []struct {
		name string
		e    event.Event
	}{
		{"queued with a bad timing", event.Event{Type: event.TypeQueued, Job: "x", Kind: event.KindRun, Timing: ownTiming(5, 5, 60)}},
		{"acquired with a bad timing", event.Event{Type: event.TypeAcquired, Job: "e2", Worker: "w1", Timing: ownTiming(2, 60, 5)}},
		{"details too long", event.Event{Type: event.TypeHeartbeat, Job: "t1", Lease: 20, Worker: "w1", Details: big}},
		{"details on a start", event.Event{Type: event.TypeRunning, Job: "t1", Lease: 20, Worker: "w1", Details: []byte(`{}`)}},
	} {
		tab := sampleTable(t)
		before := tab.String()
		e := tc.e
		e.Seq = tab.Seq() + 1
		if e.Type == event.TypeAcquired {
			e.Lease = e.Seq
		}
		if err := tab.Apply(&e); err == nil {
			t.Errorf("%s: applied", tc.name)
		} else if tab.String() != before {
			t.Errorf("%s: refused (%v) but the table changed", tc.name, err)
		}
	}
}
