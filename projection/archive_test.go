package projection_test

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/leaselog/leaselog/projection"
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
