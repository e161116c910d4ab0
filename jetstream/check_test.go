package jetstream

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/crashtest"
	"github.com/leaselog/leaselog/internal/testkit/linearize"
	"github.com/leaselog/leaselog/replay"
)

// acked is what the daemons of a test acknowledged: every event that was
// durable (in the stream, acknowledged by it) in a daemon's log when one of
// its commands had returned without error. The check holds the stream to it.
// calls, if set, records every call the scenario made to its daemons, for
// the check to hold to the porcupine model.
type acked struct {
	events []event.Event
	calls  *linearize.Recorder
}

// record takes, after commands on log returned without error, the events it
// holds durably past those already recorded. A log behind the record (a
// standby catching up) adds nothing; that they agree is the check's to say.
func (a *acked) record(t testing.TB, log *eventlog.Log) {
	t.Helper()
	for seq := uint64(len(a.events)) + 1; seq <= log.DurableSeq(); seq++ {
		e, err := log.Get(seq)
		if err != nil {
			t.Fatalf("record acknowledged seq %d: %v", seq, err)
		}
		a.events = append(a.events, e.Clone())
	}
}

// checkFinished holds the end of a scenario to docs/design.md §7. A cache rebuilt
// from the stream alone (a new store on servers, its cache in a new folder)
// and the cache of every surviving daemon (once a standby's has caught up)
// must each pass replay.Verify — seqs from 1 without a gap, legal
// transitions, tokens growing, snapshots, indexes and archive right — and
// hold the same events and archive: the stream is the truth. Every
// acknowledged event must be in it at its seq with the same content
// (crashtest.SameEvent); no job may hold two live leases at once; and no
// lease may have expired — these scenarios heartbeat their running lease
// across every takeover and restart, so an expiry is one the takeover caused.
// When the scenario recorded its calls (ack.calls), their history, with the
// stream's events, must be linearizable (linearize.Model, porcupine).
func checkFinished(t *testing.T, ack *acked, replicas int, servers []*server.Server, surviving ...*Store) {
	t.Helper()
	rebuilt := open(t, t.TempDir(), replicas, servers...)
	defer rebuilt.Close()
	stream := rebuilt.Log()
	want := dump(t, stream)
	caches := append([]*Store{rebuilt}, surviving...)
	for i, s := range caches {
		what := "the cache rebuilt from the stream"
		if i > 0 {
			what = fmt.Sprintf("surviving daemon %d's cache", i)
		}
		waitFor(t, 10*time.Second, what+" to reach the stream's end", func() bool {
			return s.Log().DurableSeq() >= stream.LastSeq()
		})
		if _, err := replay.Verify(s.Log()); err != nil {
			t.Fatalf("docs/design.md §7: %s: %v", what, err)
		}
		if got := dump(t, s.Log()); !slices.Equal(got, want) {
			t.Fatalf("docs/design.md §7: %s holds\n%v\nthe stream holds\n%v", what, got, want)
		}
	}

	if len(ack.events) == 0 {
		t.Fatal("the scenario recorded no acknowledged event to check")
	}
	evs := events(t, stream)
	if err := checkEvents(evs, ack.events); err != nil {
		t.Fatalf("docs/design.md §7: %v", err)
	}
	if ack.calls != nil {
		checkLinearizable(t, ack.calls, evs)
	}
}

// checkEvents checks the events of the stream, evs, against those
// acknowledged: each at its seq with the same content; then that no job
// holds two live leases, and that no lease expired.
func checkEvents(evs, acked []event.Event) error {
	if n := len(acked); n > len(evs) {
		return fmt.Errorf("acknowledged events lost: the stream ends at seq %d; seq %d..%d were acknowledged", len(evs), len(evs)+1, n)
	}
	for i, e := range acked {
		if diff := crashtest.SameEvent(evs[i], e); diff != "" {
			return fmt.Errorf("acknowledged seq %d differs in the stream:\n%s", e.Seq, diff)
		}
	}
	if err := oneLiveLease(evs); err != nil {
		return err
	}
	for _, e := range evs {
		if e.Type == event.TypeExpired {
			return fmt.Errorf("a lease expired across the scenario (its running lease heartbeats): %s", e.String())
		}
	}
	return nil
}

// oneLiveLease checks that no job is granted a lease while another of its
// leases is live, and that every event about a live lease names it. The
// state machine refuses the same (an acquisition only from queued); this
// says it of the events themselves, whatever the fold.
func oneLiveLease(evs []event.Event) error {
	live := map[string]uint64{} // job → its live lease
	for _, e := range evs {
		switch e.Type {
		case event.TypeAcquired:
			if l, ok := live[e.Job]; ok {
				return fmt.Errorf("job %s granted lease %d at seq %d while lease %d is live", e.Job, e.Lease, e.Seq, l)
			}
			live[e.Job] = e.Lease
		case event.TypeRunning, event.TypeHeartbeat, event.TypeRevoked:
			if l, ok := live[e.Job]; e.Job != "" && (!ok || l != e.Lease) {
				return fmt.Errorf("seq %d (%s) names lease %d of job %s, whose live lease is %d", e.Seq, e.Type, e.Lease, e.Job, l)
			}
		case event.TypeReported, event.TypeExpired, event.TypeLost, event.TypeCancelled:
			delete(live, e.Job)
		}
	}
	return nil
}

// events reads every event of log, in order.
func events(t testing.TB, log *eventlog.Log) []event.Event {
	t.Helper()
	var out []event.Event
	it := log.Iter(1)
	for it.Next() {
		out = append(out, it.Event().Clone())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// without returns nodes less the one gone.
func without(nodes []*server.Server, gone *server.Server) []*server.Server {
	return slices.DeleteFunc(slices.Clone(nodes), func(n *server.Server) bool { return n == gone })
}

// TestCheckEventsFails: the check of the events finds what it is there to
// find, each on an otherwise good history.
func TestCheckEventsFails(t *testing.T) {
	good := []event.Event{
		{Seq: 1, Type: event.TypeDaemonStarted, Time: 1},
		{Seq: 2, Type: event.TypeQueued, Job: "j", Kind: event.KindRun, Time: 2},
		{Seq: 3, Type: event.TypeAcquired, Job: "j", Lease: 3, Worker: "w1", Time: 3},
		{Seq: 4, Type: event.TypeHeartbeat, Job: "j", Lease: 3, Worker: "w1", Time: 4},
	}
	if err := checkEvents(good, good[:3]); err != nil {
		t.Fatalf("a good history: %v", err)
	}
	with := func(change func([]event.Event) []event.Event) []event.Event {
		return change(slices.Clone(good))
	}
	for _, c := range []struct {
		name       string
		evs, acked []event.Event
	}{
		{"acknowledged lost", good[:2], good[:3]},
		{"acknowledged changed", with(func(e []event.Event) []event.Event { e[1].Job = "k"; return e }), good},
		{"two live leases", with(func(e []event.Event) []event.Event {
			return append(e, event.Event{Seq: 5, Type: event.TypeAcquired, Job: "j", Lease: 5, Worker: "w2"})
		}), good},
		{"a heartbeat of a lease not live", with(func(e []event.Event) []event.Event { e[3].Lease = 2; return e }), good[:3]},
		{"an expiry", with(func(e []event.Event) []event.Event {
			return append(e, event.Event{Seq: 5, Type: event.TypeExpired, Job: "j", Lease: 3})
		}), good},
	} {
		if err := checkEvents(c.evs, c.acked); err == nil {
			t.Errorf("%s: the check passed", c.name)
		}
	}
}
