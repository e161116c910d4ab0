package projection_test

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/timing"
)

// retiredRecords folds the sample table in RetireRecord mode and returns
// what it retired: the records the daemon writes to the archive.
func retiredRecords(t testing.TB) []projection.Record {
	tab := projection.New()
	tab.SetRetire(projection.RetireRecord)
	f := &folder{t: t, tab: tab}
	var out []projection.Record
	for _, e := range sampleEvents() {
		f.apply(e)
		for _, r := range tab.TakeRetired() {
			out = append(out, projection.Record{Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value)})
		}
	}
	return out
}

// TestArchiveRecordsRoundTrip: what a RetireRecord table hands over decodes
// to what a RetireKeep table folding the same events keeps, and re-encodes
// to the same records (RetiredRecords).
func TestArchiveRecordsRoundTrip(t *testing.T) {
	recs := retiredRecords(t)
	keep := sampleTable(t)
	want := map[string][]byte{}
	for _, r := range keep.RetiredRecords() {
		want[string(r.Key)] = r.Value
	}
	if len(recs) != len(want) || len(recs) != 5 { // jobs r1 and t2, leases 5 and 21, the stale report
		t.Fatalf("%d records retired, %d kept; want 5", len(recs), len(want))
	}
	for _, r := range recs {
		if !bytes.Equal(want[string(r.Key)], r.Value) {
			t.Fatalf("record %q differs between modes", r.Key)
		}
		job, lease, ok := projection.ParseArchiveKey(r.Key)
		switch {
		case ok && job != "":
			j, err := projection.DecodeJob(job, r.Value)
			if kj, _ := keep.Job(job); err != nil || j.Ref != kj.Ref || !bytes.Equal(j.Result, kj.Result) || j.State != kj.State || j.Attempts != kj.Attempts || j.Timing != kj.Timing {
				t.Fatalf("job %q decodes to %+v (%v), kept %+v", job, j, err, kj)
			}
		case ok:
			l, err := projection.DecodeLease(lease, r.Value)
			if kl, _ := keep.Lease(lease); err != nil || !reflect.DeepEqual(l, kl) {
				t.Fatalf("lease %d decodes to %+v (%v), kept %+v", lease, l, err, kl)
			}
		default:
			if _, err := projection.DecodeStale(r.Value); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// FuzzDecodeArchive: no bytes make the archive decoders panic; what they
// refuse wraps ErrArchive.
func FuzzDecodeArchive(f *testing.F) {
	for _, r := range retiredRecords(f) {
		f.Add(r.Value)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := projection.DecodeJob("j", b); err != nil && !errors.Is(err, projection.ErrArchive) {
			t.Fatal(err)
		}
		if _, err := projection.DecodeLease(1, b); err != nil && !errors.Is(err, projection.ErrArchive) {
			t.Fatal(err)
		}
		if _, err := projection.DecodeStale(b); err != nil && !errors.Is(err, projection.ErrArchive) {
			t.Fatal(err)
		}
	})
}

// TestArchiveJobVersion3: one job record version 3 holds a job's scheduling
// and its own timing, either or both: the timing, if any, after the
// scheduling (a record without one ends there, as the routing branch's
// version 3 does). A lease granted with a timing is version 2.
func TestArchiveJobVersion3(t *testing.T) {
	own := timing.Config{Renew: 2 * time.Second, Grace: 5 * time.Second, Toleration: 9 * time.Second}
	labels := event.MustLabels(map[string]string{"gpu": "a100"})
	for _, tc := range []struct {
		name     string
		queued   event.Event
		version  byte // of the job's record
		leaseVer byte
	}{
		{"scheduling", event.Event{Labels: labels, Priority: 3}, 3, 1},
		{"timing", event.Event{Timing: own}, 3, 2},
		{"both", event.Event{Labels: labels, Priority: -1, NotBefore: 5, Timing: own}, 3, 2},
		{"a cap and a timing", event.Event{Kind: event.KindEvaluation, MaxRequeues: 2, Timing: own}, 3, 2},
		{"neither", event.Event{}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := projection.New()
			tab.SetRetire(projection.RetireRecord)
			f := &folder{t: t, tab: tab}
			q := tc.queued
			q.Type, q.Time, q.Job = event.TypeQueued, 10, "j"
			if q.Kind == 0 {
				q.Kind = event.KindRun
			}
			f.apply(q,
				event.Event{Type: event.TypeAcquired, Time: 20, Job: "j", Worker: "w", Timing: q.Timing},
				event.Event{Type: event.TypeReported, Time: 30, Job: "j", Lease: 2, Worker: "w", Outcome: event.OutcomeSucceeded})
			recs := tab.TakeRetired()
			if len(recs) != 2 {
				t.Fatalf("%d records retired, want the job's and the lease's", len(recs))
			}
			for _, r := range recs {
				job, lease, _ := projection.ParseArchiveKey(r.Key)
				if job != "" {
					j, err := projection.DecodeJob(job, r.Value)
					if err != nil || r.Value[0] != tc.version || j.Labels != q.Labels || j.Priority != int(q.Priority) ||
						j.NotBefore != q.NotBefore || j.Timing != q.Timing || j.MaxRequeues != int(q.MaxRequeues) {
						t.Fatalf("job record version %d decodes to %+v (%v); want version %d of %+v", r.Value[0], j, err, tc.version, q)
					}
					continue
				}
				l, err := projection.DecodeLease(lease, r.Value)
				if err != nil || r.Value[0] != tc.leaseVer || l.Timing != q.Timing {
					t.Fatalf("lease record version %d decodes to %+v (%v); want version %d with timing %v", r.Value[0], l, err, tc.leaseVer, q.Timing)
				}
			}
		})
	}
}

// TestReportRetiresWithTheJob: the table holds no report's ref or result
// (a report ends the job); the job it retires has them, and its one
// attempt, kept (RetireKeep) or recorded (RetireRecord).
func TestReportRetiresWithTheJob(t *testing.T) {
	for _, mode := range []projection.RetireMode{projection.RetireKeep, projection.RetireRecord} {
		tab := projection.New()
		tab.SetRetire(mode)
		f := &folder{t: t, tab: tab}
		result := []byte(`{"score":0.9}`)
		f.apply(
			event.Event{Type: event.TypeQueued, Time: 1, Job: "e1", Kind: event.KindEvaluation},
			event.Event{Type: event.TypeAcquired, Time: 2, Job: "e1", Worker: "w1"},
		)
		e := event.Event{Seq: tab.Seq() + 1, Type: event.TypeReported, Time: 3, Job: "e1", Lease: tab.Seq(), Worker: "w1",
			Outcome: event.OutcomeSucceeded, Ref: "refs/r", Result: result, Reason: "done"}
		if err := tab.Apply(&e); err != nil {
			t.Fatal(err)
		}
		e.Ref, result[0] = "refs/other", 'x' // the event's memory, reused by its caller
		var j projection.Job
		if mode == projection.RetireKeep {
			j, _ = tab.Job("e1")
		} else {
			recs := tab.TakeRetired()
			var err error
			if j, err = projection.DecodeJob("e1", recs[0].Value); err != nil || len(recs) != 2 {
				t.Fatalf("%d records: %v", len(recs), err)
			}
		}
		if j.Ref != "refs/r" || string(j.Result) != `{"score":0.9}` || j.Reason != "done" || j.Attempts != 1 || j.Outcome != event.OutcomeSucceeded {
			t.Errorf("mode %d: retired %+v", mode, j)
		}
	}
}
