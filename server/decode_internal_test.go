package server

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
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

// bodyTargets make what the calls that take a body decode it into.
var bodyTargets = []func() any{
	func() any { return new(api.Acquire) }, func() any { return new(api.Heartbeat) },
	func() any { return new(api.Report) }, func() any { return new(api.Start) }, func() any { return new(api.Submit) },
	func() any { return new(api.SubmitBatch) }, func() any { return new(struct{}) }, // a cancel's, a kill's
}

// FuzzDecodeJSON: decodeJSON, which tries encoding/json/v2 first, decides
// every body as decodeObject alone (encoding/json and its checks) does, once
// the depth is checked: the same values, or the same refusal. Seeds are bodies of each worker call and
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
	f.Fuzz(func(t *testing.T, b []byte) {
		b = bytes.TrimSpace(b)
		if len(b) == 0 || b[0] != '{' {
			return // decided before either decoder
		}
		for _, target := range bodyTargets {
			got, want := target(), target()
			gotErr, wantErr := decodeJSON(b, got, false), checkDepth(b)
			if wantErr == nil {
				wantErr = decodeObject(b, want)
			}
			if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
				t.Fatalf("%T %q: decodeJSON says %v, encoding/json %v", got, b, gotErr, wantErr)
			}
			if gotErr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("%T %q: decodeJSON gives %+v, encoding/json %+v", got, b, got, want)
			}
		}
	})
}

// TestCheckDepth: the depth counts the objects and arrays open at once, the
// body's own included, and not the brackets of strings; a body at MaxDepth
// passes, one a level deeper is refused at the byte that goes too deep.
func TestCheckDepth(t *testing.T) {
	open := func(n int) string { return strings.Repeat("[", n) }
	shut := func(n int) string { return strings.Repeat("]", n) }
	for _, tc := range []struct {
		name, body string
		at         int // the byte the refusal names; -1: accepted
	}{
		{"flat", `{"a":1,"b":[1,{"c":[]}]}`, -1},
		{"at the limit", `{"a":` + open(MaxDepth-1) + shut(MaxDepth-1) + `}`, -1},
		{"arrays one too deep", `{"a":` + open(MaxDepth), 5 + MaxDepth - 1},
		{"objects one too deep", strings.Repeat(`{"a":`, MaxDepth+1), 5 * MaxDepth},
		{"at the limit twice", `{"a":` + open(MaxDepth-1) + shut(MaxDepth-1) + `,"b":` + open(MaxDepth-1) + shut(MaxDepth-1) + `}`, -1},
		{"brackets in a string", `{"a":"` + open(2*MaxDepth) + `"}`, -1},
		{"after an escaped quote", `{"a":"\"` + open(2*MaxDepth) + `"}`, -1},
		{"after an escaped backslash", `{"a":"\\",` + open(MaxDepth), 10 + MaxDepth - 1},
		{"closers give no credit", `{}` + shut(MaxDepth) + open(MaxDepth+1), 2 + 2*MaxDepth},
		{"a string never closed", `{"a":"` + open(2*MaxDepth), -1},
		{"a backslash last", `{"a":"\`, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkDepth([]byte(tc.body))
			if tc.at < 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			want := fmt.Sprintf("body: objects and arrays nested more than %d deep (at byte %d)", MaxDepth, tc.at)
			var apiErr *api.Error
			if !errors.As(err, &apiErr) || apiErr.Status != 400 || apiErr.Code != api.CodeBadRequest || apiErr.Message != want {
				t.Fatalf("%v, want 400 %s", err, want)
			}
		})
	}
}

// Whatever a body holds, decodeJSON allocates at most decodeBytesPerByte
// bytes per byte of it, plus decodeBaseBytes. The most per byte is a batch
// of empty jobs with an unknown field after it, decoded twice (v2, then v1
// to say what is wrong): 88 bytes of api.Submit per 3 bytes of "{},", about
// 170 per byte in all. The base holds each level's state of the decoders,
// up to MaxDepth of them, and the error.
const (
	decodeBytesPerByte = 224
	decodeBaseBytes    = 64 << 10
)

// allocated is how many bytes f allocates: the least of up to three runs,
// stopping at one within limit, as another goroutine's allocations (a
// server of an earlier test closing) can only add to a run's.
func allocated(limit uint64, f func()) uint64 {
	least := ^uint64(0)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		if least = min(least, after.TotalAlloc-before.TotalAlloc); least <= limit {
			break
		}
	}
	return least
}

// checkDecodeMemory fails t if decodeJSON allocates more for b, decoded into
// any body's type, than decodeBytesPerByte per byte plus decodeBaseBytes.
func checkDecodeMemory(t *testing.T, b []byte) {
	t.Helper()
	limit := uint64(decodeBytesPerByte*len(b) + decodeBaseBytes)
	for _, target := range bodyTargets {
		v := target()
		var err error
		if n := allocated(limit, func() { err = decodeJSON(b, v, false) }); n > limit {
			t.Fatalf("%T: decodeJSON allocates %d bytes for a body of %d (%.0f per byte), over %d; it says %v",
				v, n, len(b), float64(n)/float64(len(b)), limit, err)
		}
	}
}

// hostileBodies are bodies of about n bytes shaped to make a decoder's
// memory grow faster than the body: this package's until issue 23 took
// 10 GB for the first at n = 200 KB, and its cost grew with the square of
// n for the first two.
func hostileBodies(n int) []struct{ name, body string } {
	keys := func(n int) string { // "k0":0,"k1":1,…
		var b strings.Builder
		for i := 0; b.Len() < n; i++ {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		return b.String()
	}
	key := strings.Repeat("k", n/2)
	keyPerLevel := key[:n/2/MaxDepth]
	return []struct{ name, body string }{
		// The finding: a path built per level, quadratic in the depth.
		{"nested deep", `{"leases":` + strings.Repeat("[", n)},
		// A path built per array, under a long key: quadratic in the width.
		{"arrays under a long key, not JSON", `{"` + key + `":[` + strings.Repeat("[],", n/6) + "x"},
		{"nested 99 deep under long keys, a key twice at the bottom",
			strings.Repeat(`{"`+keyPerLevel+`":`, MaxDepth-1) + `{"a":1,"a":2}` + strings.Repeat("}", MaxDepth-1)},
		{"the same, not JSON", strings.Repeat(`{"`+keyPerLevel+`":`, MaxDepth-1) + `{"a":1,"a":2,x`},
		{"objects, not JSON", `{"a":[` + strings.Repeat("{},", n/3) + "x"},
		{"objects in a spec, an unknown field after", `{"spec":[` + strings.Repeat("{},", n/3) + `{}],"x":1}`},
		{"keys, not JSON", "{" + keys(n) + "x"},
		{"keys with escapes, one twice", `{"spec":{` + strings.ReplaceAll(keys(n), `"k`, `"\u006b`) + `"k0":0}}`},
		{"numbers, not JSON", `{"leases":[` + strings.Repeat("1,", n/2) + "x"},
		{"a batch of empty jobs, an unknown field after", `{"jobs":[` + strings.Repeat("{},", n/3) + `{}],"x":1}`},
	}
}

// TestDecodeMemoryIsLinear: decodeJSON's memory grows with the body, not
// with its depth or width, for every body's type (the bodies are refused or
// accepted: either way). The bodies of 10 KB come first: a quadratic decoder
// fails on them, and never starts on those of 200 KB.
func TestDecodeMemoryIsLinear(t *testing.T) {
	for _, n := range []int{10 << 10, 200 << 10} {
		for _, h := range hostileBodies(n) {
			t.Logf("%s: %d bytes", h.name, len(h.body))
			checkDecodeMemory(t, []byte(h.body)) // not a subtest: the first failure stops the test
		}
	}
}

// FuzzDecodeMemory: for any body, decodeJSON allocates at most
// decodeBytesPerByte bytes per byte plus decodeBaseBytes, for every body's
// type. Seeds are the hostile bodies of 2 KB and a body of each call.
func FuzzDecodeMemory(f *testing.F) {
	for _, h := range hostileBodies(2 << 10) {
		f.Add([]byte(h.body))
	}
	for _, s := range []string{
		`{"max":1,"wait_seconds":2.5,"start":true}`, `{"leases":[1,2,3]}`, `{"worker":"w1"}`,
		`{"worker":"w1","outcome":"succeeded","result":{"a":[1,2]},"next":{"max":1,"start":true}}`,
		`{"id":"j1","kind":"run","spec":{"run":"make","env":{"A":"1"}},"after":["j0"]}`,
		`{"jobs":[{"id":"j1","kind":"run"},{"id":"j2","kind":"run","spec":{"a":[[{"b":1,"b":2}]]}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(checkDecodeMemory)
}
