package event

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/leaselog/leaselog/timing"
)

func sampleEvents() []Event {
	id := ulid.MustParse("01JH0000000000000000000000")
	return []Event{
		{Seq: 1, ID: id, Type: TypeDaemonStarted, Time: 1},
		{Seq: 2, ID: id, Type: TypeQueued, Time: 1e18, Job: "j1", Kind: KindEvaluation, Spec: []byte(`{"run":"make"}`), MaxRequeues: 1<<32 - 1},
		{Seq: 3, ID: id, Type: TypeAcquired, Time: 1e18 + 5, Job: "j1", Lease: 3, Worker: "w1"},
		{Seq: 4, ID: id, Type: TypeRevoked, Time: -7, Job: "j1", Lease: 3, Worker: "w1", Mode: RevokeKill},
		{Seq: 5, ID: id, Type: TypeReported, Time: 9, Job: "j1", Lease: 3, Worker: "w1", Outcome: OutcomeKilled,
			Ref: "refs/leaselog/j1/3", Reason: "killed by client", Result: []byte(`{"ok":false}`)},
		{Seq: 6, ID: id, Type: TypeDaemonResumed, Time: 10, Gap: 3600e9},
		{Seq: 1 << 62, ID: id, Type: TypeStaleReport, Time: 11, Job: strings.Repeat("j", 256), Lease: 1 << 61, Worker: "w"},
		{Seq: 41, ID: id, Type: TypeQueued, Time: 12, Job: "j2", Kind: KindRun,
			Labels: MustLabels(map[string]string{"gpu": "a100", "repo": "piloop"}), Priority: -1 << 31, NotBefore: 1e18 + 60e9},
		{Seq: 40, ID: id, Type: TypeHeartbeats, Time: 30, Job: "j1", Lease: 3, Worker: "w1",
			Beats: Beats{Count: 4, FirstSeq: 7, FirstTime: -2, Claim: ClaimOf(7) + ClaimOf(9) + ClaimOf(20)}, Details: []byte(`{"step":9}`)},
		{Seq: 41, ID: id, Type: TypeQueued, Time: 31, Job: "j2", Kind: KindRun,
			Timing: timing.Config{Renew: 2 * time.Second, Grace: 5 * time.Second, Toleration: 1<<63 - 1}},
		{Seq: 42, ID: id, Type: TypeHeartbeat, Time: 32, Job: "j2", Lease: 43, Worker: "w1", Details: []byte(`{"step":3}`)},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for _, e := range sampleEvents() {
		b := AppendRecord(nil, &e)
		got, err := Decode(e.Seq, b)
		if err != nil {
			t.Fatalf("seq %d: %v", e.Seq, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("seq %d round trip:\n got %+v\nwant %+v", e.Seq, got, e)
		}
	}
}

// TestRecordUnderWrongKey checks that the checksum binds a record to its key.
func TestRecordUnderWrongKey(t *testing.T) {
	e := sampleEvents()[1]
	b := AppendRecord(nil, &e)
	_, err := Decode(e.Seq+1, b)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "seq 3") {
		t.Fatalf("decode under the wrong seq: %v, want ErrCorrupt naming seq 3", err)
	}
}

func TestDecodeCorrupt(t *testing.T) {
	e := sampleEvents()[4]
	good := AppendRecord(nil, &e)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"truncated", good[:len(good)-3]},
		{"bit flip", flip(good, len(good)/2)},
		{"header only", good[:headerLen]},
	} {
		_, err := Decode(e.Seq, tc.b)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", tc.name, err)
			continue
		}
		if !strings.Contains(err.Error(), "seq 5") {
			t.Errorf("%s: %q does not name the sequence number", tc.name, err)
		}
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x40
	return c
}

// TestDecodeSkipsUnknownFields is the forward-compatibility promise: a field
// added by a later version is skipped by this one.
func TestDecodeSkipsUnknownFields(t *testing.T) {
	e := sampleEvents()[2]
	b := AppendRecord(nil, &e)
	b = append(b, 200, 3, 'n', 'e', 'w') // tag 200, 3 bytes
	binary.LittleEndian.PutUint32(b, recordChecksum(e.Seq, b[4:]))
	got, err := Decode(e.Seq, b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, e) {
		t.Errorf("got %+v, want %+v", got, e)
	}
}

// TestDecodeMaxRequeues: a record written before max_requeues (no field 12)
// is an uncapped job; a cap past 32 bits is corrupt, naming its seq.
func TestDecodeMaxRequeues(t *testing.T) {
	e := sampleEvents()[1]
	e.MaxRequeues = 0
	old := AppendRecord(nil, &e)
	if got, err := Decode(e.Seq, old); err != nil || got.MaxRequeues != 0 {
		t.Fatalf("a record without the field: %+v, %v", got, err)
	}
	big := binary.AppendUvarint([]byte{tagMaxRequeues, 5}, 1<<32)
	b := append(bytes.Clone(old), big...)
	binary.LittleEndian.PutUint32(b, recordChecksum(e.Seq, b[4:]))
	if _, err := Decode(e.Seq, b); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "seq 2") {
		t.Fatalf("a cap of 2^32: %v, want ErrCorrupt naming seq 2", err)
	}
	if got := e.String(); strings.Contains(got, "max_requeues") {
		t.Errorf("String of an uncapped job %q names max_requeues", got)
	}
	e.MaxRequeues = 3
	if got := e.String(); !strings.HasSuffix(got, " max_requeues=3") {
		t.Errorf("String %q does not end with max_requeues=3", got)
	}
}

func TestDecodeNewerVersion(t *testing.T) {
	e := sampleEvents()[0]
	b := AppendRecord(nil, &e)
	b[4] = recordVersion + 1
	binary.LittleEndian.PutUint32(b, recordChecksum(e.Seq, b[4:]))
	if _, err := Decode(e.Seq, b); !errors.Is(err, ErrNewerFormat) {
		t.Fatalf("err = %v, want ErrNewerFormat", err)
	}
}

// FuzzRecordRoundTrip: whatever the fields, decode(encode(e)) == e.
func FuzzRecordRoundTrip(f *testing.F) {
	for _, e := range sampleEvents() {
		f.Add(e.Seq, uint8(e.Type), e.Time, e.Job, e.Lease, e.Worker, uint8(e.Kind), uint8(e.Outcome), uint8(e.Mode), e.Ref, e.Reason, e.Gap, e.Spec, e.Result)
	}
	f.Fuzz(func(t *testing.T, seq uint64, typ uint8, tm int64, job string, lease uint64, worker string, kind, outcome, mode uint8, ref, reason string, gap int64, spec, result []byte) {
		e := Event{Seq: seq, Type: Type(typ), Time: tm, Job: job, Lease: lease, Worker: worker, Kind: Kind(kind),
			Outcome: Outcome(outcome), Mode: RevokeMode(mode), Ref: ref, Reason: reason, Gap: gap, Spec: spec, Result: result}
		e.ID[3] = byte(seq)
		if e.Type == TypeAcquired {
			e.Lease = e.Seq
		}
		if len(e.Spec) == 0 {
			e.Spec = nil
		}
		if len(e.Result) == 0 {
			e.Result = nil
		}
		got, err := Decode(seq, AppendRecord(nil, &e))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, e)
		}
	})
}

// FuzzDecode: no input makes Decode panic, and anything it accepts encodes
// back to a record that decodes to the same event.
func FuzzDecode(f *testing.F) {
	for _, e := range sampleEvents() {
		f.Add(e.Seq, AppendRecord(nil, &e))
	}
	f.Add(uint64(1), []byte{})
	f.Fuzz(func(t *testing.T, seq uint64, b []byte) {
		check := func(b []byte) {
			e, err := Decode(seq, b)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNewerFormat) {
					t.Fatalf("error %v is neither ErrCorrupt nor ErrNewerFormat", err)
				}
				return
			}
			again, err := Decode(seq, AppendRecord(nil, &e))
			if err != nil || !reflect.DeepEqual(again, e) {
				t.Fatalf("re-encode of an accepted record: %v\n got %+v\nwant %+v", err, again, e)
			}
		}
		check(b)
		// Random bytes almost never carry a valid checksum; fix it so that the
		// field parser behind the check is fuzzed too.
		if len(b) >= 4 {
			fixed := bytes.Clone(b)
			binary.LittleEndian.PutUint32(fixed, recordChecksum(seq, fixed[4:]))
			check(fixed)
		}
	})
}

func TestRecordChecksumBindsSeq(t *testing.T) {
	body := []byte("the rest of a record")
	seen := map[uint32]uint64{}
	for seq := uint64(0); seq < 100_000; seq++ {
		c := recordChecksum(seq, body)
		if other, dup := seen[c]; dup {
			t.Fatalf("seqs %d and %d share a checksum", other, seq)
		}
		seen[c] = seq
	}
	if n := testing.AllocsPerRun(100, func() { recordChecksum(7, body) }); n != 0 {
		t.Errorf("recordChecksum allocates %v times", n)
	}
}

func TestTypeNames(t *testing.T) {
	for _, typ := range Types() {
		got, err := ParseType(typ.String())
		if err != nil || got != typ {
			t.Errorf("ParseType(%q) = %v, %v", typ, got, err)
		}
	}
	if _, err := ParseType("lease.bogus"); err == nil {
		t.Error("ParseType accepted an unknown type")
	}
	if Type(0).Known() || Type(NumTypes).Known() {
		t.Error("Known accepts out-of-range types")
	}
}

func BenchmarkEncode(b *testing.B) {
	e := sampleEvents()[4]
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = AppendRecord(buf[:0], &e)
	}
}

func BenchmarkDecode(b *testing.B) {
	e := sampleEvents()[4]
	rec := AppendRecord(nil, &e)
	var out Event
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := DecodeAliased(e.Seq, rec, &out); err != nil {
			b.Fatal(err)
		}
	}
}
