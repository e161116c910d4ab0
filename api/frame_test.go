package api

import (
	"bytes"
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
