package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/server"
)

func testAuth() *server.Auth {
	return &server.Auth{
		Admin:     []string{adminTok},
		Auditor:   []string{auditorTok},
		Workers:   map[string]string{"w1": w1Tok, "w2": w2Tok},
		AnyWorker: []string{anyTok},
	}
}

const (
	adminTok   = "admin-token-0123456789"
	auditorTok = "auditor-token-0123456789"
	w1Tok      = "w1-token-0123456789"
	w2Tok      = "w2-token-0123456789"
	anyTok     = "any-worker-token-0123456789"
)

// TestAuthRoles walks each role through the API: a missing or unknown token
// is 401, a known token doing what its role may not is 403.
func TestAuthRoles(t *testing.T) {
	f := newFixture(t, server.Options{Auth: testAuth()})
	f.submit("j1", event.KindRun)
	l := f.grant("w1")
	f.submit("k1", event.KindRun)
	l2 := f.grant("w9")
	f.submit("q1", event.KindRun)
	f.submit("q2", event.KindRun)
	start := fmt.Sprintf("/v1/leases/%d/start", l)
	report := fmt.Sprintf("/v1/leases/%d/report", l)
	start2 := fmt.Sprintf("/v1/leases/%d/start", l2)
	report2 := fmt.Sprintf("/v1/leases/%d/report", l2)

	steps := []struct {
		method, path, token string
		body                any
		status              int
	}{
		{"GET", "/healthz", "", nil, http.StatusOK},
		{"GET", "/healthz", "nope", nil, http.StatusOK},

		{"GET", "/v1/jobs", "", nil, http.StatusUnauthorized},
		{"GET", "/v1/jobs", "nope", nil, http.StatusUnauthorized},
		{"GET", "/metrics", "", nil, http.StatusUnauthorized},
		{"POST", "/v1/workers/w1/acquire", "", `{}`, http.StatusUnauthorized},
		{"POST", start, "", api.Start{Worker: "w1"}, http.StatusUnauthorized},

		{"POST", "/v1/jobs", adminTok, api.Submit{ID: "j2", Kind: "run"}, http.StatusCreated},
		{"GET", "/v1/jobs", adminTok, nil, http.StatusOK},
		{"GET", "/v1/jobs/j1", adminTok, nil, http.StatusOK},
		{"GET", "/v1/jobs/j1/history", adminTok, nil, http.StatusOK},
		{"POST", "/v1/jobs/q1/cancel", adminTok, nil, http.StatusOK},
		{"GET", "/v1/leases", adminTok, nil, http.StatusOK},
		{"GET", "/v1/events", adminTok, nil, http.StatusOK},
		{"GET", "/metrics", adminTok, nil, http.StatusOK},
		{"GET", "/v1/workers/w1/leases", adminTok, nil, http.StatusOK},
		{"POST", "/v1/workers/w1/acquire", adminTok, `{}`, http.StatusForbidden},
		{"POST", "/v1/workers/w1/heartbeat", adminTok, `{}`, http.StatusForbidden},
		{"POST", start, adminTok, api.Start{Worker: "w1"}, http.StatusForbidden},
		{"POST", report, adminTok, api.Report{Worker: "w1", Outcome: "failed"}, http.StatusForbidden},

		{"GET", "/v1/jobs", auditorTok, nil, http.StatusOK},
		{"GET", "/v1/jobs/j1", auditorTok, nil, http.StatusOK},
		{"GET", "/v1/jobs/j1/history", auditorTok, nil, http.StatusOK},
		{"GET", "/v1/leases", auditorTok, nil, http.StatusOK},
		{"GET", "/v1/events", auditorTok, nil, http.StatusOK},
		{"GET", "/metrics", auditorTok, nil, http.StatusOK},
		{"GET", "/v1/workers/w1/leases", auditorTok, nil, http.StatusOK},
		{"POST", "/v1/jobs", auditorTok, api.Submit{ID: "j3", Kind: "run"}, http.StatusForbidden},
		{"POST", "/v1/jobs/q2/cancel", auditorTok, nil, http.StatusForbidden},
		{"POST", "/v1/jobs/q2/kill", auditorTok, nil, http.StatusForbidden},
		{"POST", api.BackupPath, auditorTok, api.BackupRequest{To: "/b1"}, http.StatusForbidden},
		{"POST", "/v1/workers/w1/acquire", auditorTok, `{}`, http.StatusForbidden},
		{"POST", start, auditorTok, api.Start{Worker: "w1"}, http.StatusForbidden},

		{"GET", "/v1/jobs", w1Tok, nil, http.StatusForbidden},
		{"GET", "/v1/jobs/j1", w1Tok, nil, http.StatusForbidden},
		{"GET", "/v1/events", w1Tok, nil, http.StatusForbidden},
		{"GET", "/v1/events/stream", w1Tok, nil, http.StatusForbidden},
		{"GET", "/v1/leases", w1Tok, nil, http.StatusForbidden},
		{"GET", "/metrics", w1Tok, nil, http.StatusForbidden},
		{"POST", "/v1/jobs", w1Tok, api.Submit{ID: "j4", Kind: "run"}, http.StatusForbidden},
		{"POST", "/v1/jobs/q2/kill", w1Tok, nil, http.StatusForbidden},
		{"POST", api.BackupPath, w1Tok, api.BackupRequest{To: "/b1"}, http.StatusForbidden},
		{"POST", api.BackupPath, "", api.BackupRequest{To: "/b1"}, http.StatusUnauthorized},
		{"POST", api.BackupPath, adminTok, api.BackupRequest{To: "/b1"}, http.StatusOK},
		{"POST", "/v1/workers/w2/acquire", w1Tok, `{}`, http.StatusForbidden},
		{"POST", "/v1/workers/w2/heartbeat", w1Tok, api.Heartbeat{Leases: []uint64{l}}, http.StatusForbidden},
		{"GET", "/v1/workers/w2/leases", w1Tok, nil, http.StatusForbidden},
		{"POST", start, w1Tok, api.Start{Worker: "w2"}, http.StatusForbidden}, // the body speaks for another worker
		{"POST", start, w2Tok, api.Start{Worker: "w2"}, http.StatusForbidden}, // w2's own name, w1's lease
		{"POST", report, w2Tok, api.Report{Worker: "w1", Outcome: "failed"}, http.StatusForbidden},
		{"POST", "/v1/workers/w1/acquire", w1Tok, `{}`, http.StatusOK},
		{"POST", "/v1/workers/w1/heartbeat", w1Tok, api.Heartbeat{Leases: []uint64{l}}, http.StatusOK},
		{"GET", "/v1/workers/w1/leases", w1Tok, nil, http.StatusOK},
		{"POST", start, w1Tok, api.Start{Worker: "w1"}, http.StatusOK},
		{"POST", report, w1Tok, api.Report{Worker: "w1", Outcome: "succeeded"}, http.StatusOK},

		// A token of any worker acts as any worker, and as nothing else.
		{"GET", "/v1/jobs", anyTok, nil, http.StatusForbidden},
		{"GET", "/v1/events", anyTok, nil, http.StatusForbidden},
		{"POST", "/v1/jobs", anyTok, api.Submit{ID: "j5", Kind: "run"}, http.StatusForbidden},
		{"POST", "/v1/jobs/q2/cancel", anyTok, nil, http.StatusForbidden},
		{"POST", "/v1/workers/w1/heartbeat", anyTok, api.Heartbeat{Leases: []uint64{l}}, http.StatusOK},
		{"POST", "/v1/workers/w9/acquire", anyTok, `{}`, http.StatusOK},
		{"GET", "/v1/workers/w9/leases", anyTok, nil, http.StatusOK},
		{"POST", start2, anyTok, api.Start{Worker: "w9"}, http.StatusOK},
		{"POST", report2, anyTok, api.Report{Worker: "w9", Outcome: "succeeded"}, http.StatusOK},
	}
	for _, s := range steps {
		r := f.do(s.method, s.path, s.token, s.body)
		who := s.token
		if who == "" {
			who = "no token"
		}
		switch s.status {
		case http.StatusUnauthorized:
			wantError(t, r, s.status, api.CodeUnauthorized)
			if r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s (%s): 401 without WWW-Authenticate", s.method, s.path, who)
			}
		case http.StatusForbidden:
			wantError(t, r, s.status, api.CodeForbidden)
		default:
			if r.status != s.status {
				t.Errorf("%s %s (%s): %s, want %d", s.method, s.path, who, r, s.status)
			}
		}
	}
}

func TestAuthorizationHeaderForms(t *testing.T) {
	f := newFixture(t, server.Options{Auth: testAuth()})
	for _, tc := range []struct {
		header string
		status int
	}{
		{"Bearer " + adminTok, http.StatusOK},
		{"bearer " + adminTok, http.StatusOK}, // the scheme is case-insensitive
		{"Bearer  " + adminTok + " ", http.StatusOK},
		{"Basic " + adminTok, http.StatusUnauthorized},
		{adminTok, http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"Bearer \t ", http.StatusUnauthorized},
		{"Bearer " + adminTok + "x", http.StatusUnauthorized},
		{"Bearer " + adminTok[:len(adminTok)-1], http.StatusUnauthorized},
	} {
		r := f.send(request{method: "GET", path: "/v1/jobs", header: map[string]string{"Authorization": tc.header}})
		if r.status != tc.status {
			t.Errorf("Authorization %q: %s, want %d", tc.header, r, tc.status)
		}
	}
}

func TestAuditorMayStream(t *testing.T) {
	f := newFixture(t, server.Options{Auth: testAuth()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := f.ts.Client().Do(f.newRequest(ctx, request{method: "GET", path: "/v1/events/stream", token: auditorTok}))
	f.must(err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("auditor stream: %d", resp.StatusCode)
	}
}

func TestAuthValidate(t *testing.T) {
	if err := testAuth().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		auth server.Auth
		want string
	}{
		{server.Auth{}, "auth: names no token; remove the section to run open (loopback only)"},
		{server.Auth{Admin: []string{""}}, "auth.admin[0]: a token must be at least 16 characters"},
		{server.Auth{Admin: []string{adminTok}, Auditor: []string{adminTok}}, "auth.auditor[0]: the same token is given to admin[0]"},
		{server.Auth{Workers: map[string]string{"w1": w1Tok, "w2": w1Tok}}, "auth.workers.w2: the same token is given to workers.w1"},
		{server.Auth{Workers: map[string]string{"a b": w1Tok}}, `auth.workers.a b: invalid request: worker id "a b": ' ' at byte 1 is not an ASCII letter, digit or one of . _ - : @`},
		{server.Auth{Admin: []string{"                "}}, "auth.admin[0]: a token must not contain spaces or control characters (byte 0)"},
		{server.Auth{Auditor: []string{" " + adminTok}}, "auth.auditor[0]: a token must not contain spaces or control characters (byte 0)"},
		{server.Auth{Workers: map[string]string{"w1": w1Tok + "\n"}}, fmt.Sprintf("auth.workers.w1: a token must not contain spaces or control characters (byte %d)", len(w1Tok))},
	} {
		if err := tc.auth.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("Validate(%+v) = %v, want %s", tc.auth, err, tc.want)
		}
	}
}

func TestEmptyTokenNeverAuthenticates(t *testing.T) {
	// A config with an empty token (which Validate refuses) must still not
	// let an empty bearer in.
	f := newFixture(t, server.Options{Auth: &server.Auth{Admin: []string{""}}})
	r := f.send(request{method: "GET", path: "/v1/jobs", header: map[string]string{"Authorization": "Bearer "}})
	wantError(t, r, http.StatusUnauthorized, api.CodeUnauthorized)
}

// TestBlankOrRepeatedToken: a blank bearer token, or two Authorization
// headers, are refused with a 401 that says so, and write nothing.
func TestBlankOrRepeatedToken(t *testing.T) {
	f := newFixture(t, server.Options{Auth: testAuth()})
	seq := f.seq()
	for _, tc := range []struct {
		name   string
		values []string
		saying string
	}{
		{"blank", []string{"Bearer    "}, "blank bearer token"},
		{"tab", []string{"Bearer \t"}, "blank bearer token"},
		{"scheme only", []string{"Bearer"}, "blank bearer token"},
		{"not bearer", []string{"Basic " + adminTok}, "not a bearer token"},
		{"twice", []string{"Bearer " + adminTok, "Bearer " + adminTok}, "given 2 times"},
		{"blank and good", []string{"Bearer ", "Bearer " + adminTok}, "given 2 times"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := f.newRequest(context.Background(), request{method: "POST", path: "/v1/jobs", body: api.Submit{ID: "j1", Kind: "run"}})
			for _, v := range tc.values {
				req.Header.Add("Authorization", v)
			}
			resp, err := f.ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			wantError(t, reply{status: resp.StatusCode, header: resp.Header, body: b}, http.StatusUnauthorized, api.CodeUnauthorized, tc.saying)
		})
	}
	if got := f.seq(); got != seq {
		t.Fatalf("seq %d after the refusals, was %d", got, seq)
	}
}
