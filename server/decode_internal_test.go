package server

import (
	"bytes"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/leaselog/leaselog/api"
)

// FuzzCheckJSON: checkJSON, which scans the bytes of a valid body, refuses
// exactly what the token-by-token scan it replaced refuses, with the same
// message.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":1}`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":2}}`, `{"a":[{"k":1,"k":2}]}`,
		`{"a":[[{"x":{"y":1,"y":1}}]]}`, `{"\u0061":1,"a":2}`, `{"a\"b":1,"a\"b":2}`, `{"a":"{\"a\":1,\"a\":1}"}`,
		`{"a":1,"b":{"a":1},"c":[1,{"a":1}],"a":3}`, `{"a":1 "a":2}`, `{"a":1,`, "{\"a\":\"\xff\"}",
		`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k3":3}`,
		`{"spec":{"env":[{"k":1}],"env2":{"x":[1,2,{"z":null,"z":true}]}}}`, `{"a":{},"a":[]}`, `{"":1,"":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want := checkJSON(b), checkTokens(b)
		if !utf8.Valid(b) {
			return // both refuse it: checkJSON names the byte
		}
		if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
			t.Fatalf("checkJSON(%q) = %v, the token scan says %v", b, got, want)
		}
	})
}

// TestCheckJSONAllocates: a body of small objects with plain keys is checked
// without allocating.
func TestCheckJSONAllocates(t *testing.T) {
	if raceEnabled {
		t.Skip("json.Valid's scanner comes from a sync.Pool, which the race detector empties at random")
	}
	b := []byte(`{"worker":"w1","outcome":"succeeded","result":{"score":1,"notes":["a","b"]},"leases":[1,2,3]}`)
	if n := testing.AllocsPerRun(100, func() { _ = checkJSON(b) }); n != 0 {
		t.Fatalf("checkJSON allocates %v times", n)
	}
}

// FuzzDecodeJSON: decodeJSON, which tries encoding/json/v2 first, decides
// every body as decodeObject alone (encoding/json and its checks) does: the
// same values, or the same refusal. Seeds are bodies of each worker call and
// a submit; the fuzzer mangles them.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"max":1,"wait_seconds":2.5,"start":true}`, `{"Max":1}`, `{"max":1.5}`, `{"max":1,"max":2}`,
		`{"leases":[1,2,3]}`, `{"leases":null}`, `{"leases":[-1]}`, `{"leases":[1,"x"]}`,
		`{"worker":"w1","outcome":"succeeded","result":{"a":[1,2]},"next":{"max":1,"start":true}}`,
		`{"worker":"w1","Worker":"w2"}`, `{"worker":"w\u00e9"}`, "{\"worker\":\"w\xff\"}", `{"worker":"\ud800"}`,
		`{"worker":"w1"} {}`, `{"worker":"w1","x":1}`, `{"result":null,"worker":"w1","outcome":"failed"}`,
		`{"id":"j1","kind":"run","spec":{"run":"make", "env" : {"A":"1"}},"after":["j0"]}`, `{"spec":[1, 2 ,3]}`,
	} {
		f.Add([]byte(s))
	}
	targets := []func() any{
		func() any { return new(api.Acquire) }, func() any { return new(api.Heartbeat) },
		func() any { return new(api.Report) }, func() any { return new(api.Start) }, func() any { return new(api.Submit) },
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = bytes.TrimSpace(b)
		if len(b) == 0 || b[0] != '{' {
			return // decided before either decoder
		}
		for _, target := range targets {
			got, want := target(), target()
			gotErr, wantErr := decodeJSON(b, got, false), decodeObject(b, want)
			if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
				t.Fatalf("%T %q: decodeJSON says %v, encoding/json %v", got, b, gotErr, wantErr)
			}
			if gotErr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("%T %q: decodeJSON gives %+v, encoding/json %+v", got, b, got, want)
			}
		}
	})
}
