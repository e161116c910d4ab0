package api

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// TestFrameHeaders: a header line is read as written, and a line that is
// not one is refused with what is wrong.
func TestFrameHeaders(t *testing.T) {
	req := AppendRequest(nil, 42, OpReport, "w1", "7", []byte(`{"worker":"w1"}`))
	if want := "42 report w1 7 15\n{\"worker\":\"w1\"}"; string(req) != want {
		t.Fatalf("request frame %q, want %q", req, want)
	}
	h, err := ParseRequest(req[:bytes.IndexByte(req, '\n')+1])
	if err != nil || h != (FrameHeader{ID: 42, Op: OpReport, Worker: "w1", Lease: "7", Len: 15}) {
		t.Fatalf("parsed %+v %v", h, err)
	}
	ans := AppendAnswer(nil, 42, 409, []byte("{}\n"))
	h, err = ParseAnswer(ans[:bytes.IndexByte(ans, '\n')+1])
	if err != nil || h != (FrameHeader{ID: 42, Status: 409, Len: 3}) {
		t.Fatalf("parsed %+v %v", h, err)
	}
	for _, tc := range []struct{ line, saying string }{
		{"1 heartbeat w1 - 2", "no line feed"},
		{"1 heartbeat - 2\n", "want ID OP WORKER LEASE LENGTH"},
		{"1 heartbeat w1 - 2 3\n", "want ID OP WORKER LEASE LENGTH"},
		{"1 heartbeat w1  2\n", "separated by one space"},
		{"0 heartbeat w1 - 2\n", `frame id "0"`},
		{"-1 heartbeat w1 - 2\n", `frame id "-1"`},
		{"18446744073709551616 heartbeat w1 - 2\n", "frame id"},
		{"1 heartbeat w1 - -2\n", `frame length "-2"`},
		{"1 heartbeat w1 - 4294967296\n", "frame length"},
	} {
		if _, err := ParseRequest([]byte(tc.line)); err == nil || !strings.Contains(err.Error(), tc.saying) {
			t.Errorf("%q: %v, want an error saying %s", tc.line, err, tc.saying)
		}
	}
	if _, err := ParseAnswer([]byte("1 99 0\n")); err == nil {
		t.Error("an answer of status 99 parsed")
	}
}

// FuzzParseRequest: any line is parsed or refused, never a panic; a parsed
// header written again reads the same.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{"1 heartbeat w1 - 2\n", "18446744073709551615 report w1 12 1048576\n", "x\n", "1 a b c d e\n", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		h, err := ParseRequest(line)
		if err != nil {
			return
		}
		again := AppendRequest(nil, h.ID, h.Op, h.Worker, h.Lease, make([]byte, h.Len))
		h2, err := ParseRequest(again[:bytes.IndexByte(again, '\n')+1])
		if err != nil || h2 != h {
			t.Fatalf("%q parsed as %+v, written and read again as %+v (%v)", line, h, h2, err)
		}
	})
}

// FuzzParseDecimal: parseDecimal reads what strconv.ParseUint reads in base
// 10 (signs and underscores aside, which it refuses), and refuses the rest.
func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"0", "7", "2147483647", "2147483648", "18446744073709551615", "18446744073709551616", "", "+1", "1_0", "099"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, bits := range []uint{10, 31, 64} {
			got, ok := parseDecimal([]byte(s), bits)
			want, err := strconv.ParseUint(s, 10, int(bits))
			if strings.ContainsAny(s, "+_") {
				err = errors.New("not digits alone")
			}
			if ok != (err == nil) || (ok && got != want) {
				t.Fatalf("parseDecimal(%q, %d) = %d %v; strconv: %d %v", s, bits, got, ok, want, err)
			}
		}
	})
}
