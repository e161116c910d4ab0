package worker

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/leaselog/leaselog/api"
)

// TestRefused: what a worker does about each refusal of a report.
func TestRefused(t *testing.T) {
	apiErr := func(status int, code string) error {
		return &api.Error{Status: status, Code: code, Message: "refused"}
	}
	full := Outcome{Outcome: "succeeded", Ref: "refs/x", Reason: "fine", Result: json.RawMessage(`{"score":1}`)}
	bare := Outcome{Outcome: "failed", Reason: "exit status 1"}
	long := Outcome{Outcome: "failed", Reason: strings.Repeat("é", 1000)}
	for _, tc := range []struct {
		name    string
		o       Outcome
		err     error
		do      Refusal
		outcome string // of the next report, for Resend and Later
	}{
		{"stale", full, apiErr(http.StatusConflict, api.CodeStaleLease), Final, ""},
		{"not its lease", full, apiErr(http.StatusForbidden, api.CodeForbidden), Final, ""},
		{"no such lease", full, apiErr(http.StatusNotFound, api.CodeNotFound), Final, ""},
		{"unauthorized", full, apiErr(http.StatusUnauthorized, api.CodeUnauthorized), Later, "succeeded"},
		{"unavailable", full, apiErr(http.StatusServiceUnavailable, api.CodeUnavailable), Later, "succeeded"},
		{"transport", full, errors.New("connection reset"), Later, "succeeded"},
		{"content: result and ref left out", full, apiErr(http.StatusBadRequest, api.CodeBadRequest), Resend, "succeeded"},
		{"content: body too large", full, apiErr(http.StatusRequestEntityTooLarge, api.CodeTooLarge), Resend, "succeeded"},
		{"content: a long reason cut", long, apiErr(http.StatusBadRequest, api.CodeBadRequest), Resend, "failed"},
		{"content: nothing left out, sent as lost", bare, apiErr(http.StatusBadRequest, api.CodeBadRequest), Resend, "lost"},
		{"content: a bare lost report expires", Lost(nil), apiErr(http.StatusBadRequest, api.CodeBadRequest), Expire, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, do := Refused(tc.o, tc.err)
			if do != tc.do {
				t.Fatalf("do %v, want %v", do, tc.do)
			}
			if do != Resend && do != Later {
				return
			}
			if next.Outcome != tc.outcome {
				t.Fatalf("next outcome %q, want %q", next.Outcome, tc.outcome)
			}
			if do == Later {
				if next.Reason != tc.o.Reason || next.Ref != tc.o.Ref || string(next.Result) != string(tc.o.Result) {
					t.Fatalf("sent later changed: %+v, was %+v", next, tc.o)
				}
				return
			}
			if next.Result != nil || next.Ref != "" {
				t.Fatalf("sent again with result or ref: %+v", next)
			}
			if len(next.Reason) > maxReason || !utf8.ValidString(next.Reason) || !strings.HasPrefix(next.Reason, "report refused (") {
				t.Fatalf("reason of %d bytes (valid UTF-8 %v): %q", len(next.Reason), utf8.ValidString(next.Reason), next.Reason)
			}
			// What is sent again, refused again, ends: each step leaves out more.
			for range 3 {
				if next, do = Refused(next, tc.err); do != Resend {
					break
				}
			}
			if do != Expire {
				t.Fatalf("refused again and again: %v, want expire in at most 3 steps", do)
			}
		})
	}
}

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdefghij", 10, "abcdefghij"},
		{"abcdefghijk", 10, "abcdefg…"},
		{"ééééé", 7, "éé…"}, // é is 2 bytes, … is 3: 4 bytes of é fit
		{"a\xffb", 10, "a\uFFFDb"},
	} {
		if got := cut(tc.in, tc.n); got != tc.want || len(got) > tc.n {
			t.Errorf("cut(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
