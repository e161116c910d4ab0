package server

import (
	"testing"
	"unicode/utf8"
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
