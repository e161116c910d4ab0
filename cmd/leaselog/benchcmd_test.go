package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/api"
)

// benchConfig is a daemon with no local worker and no [auth] (an open API)
// and the default timing: the bench's leases live as in production.
const benchConfig = `
[server]
listen = "127.0.0.1:0"
[plugins.executor]
local_capacity = 0
`

// TestBenchCommand runs `leaselog bench -o json` on one daemon (each run
// after the first finds the history of the others) and checks the object it
// prints: the flags reach the workload (each protocol's calls are tested in
// package workload), the clients speak h2c and sessions as asked, and the
// table says the same.
func TestBenchCommand(t *testing.T) {
	dir := t.TempDir()
	d := startServeConfig(t, dir, benchConfig)
	data := filepath.Join(dir, "data")
	for _, p := range []struct {
		flag, name string
		calls      [2]float64 // calls a job: at least, below
	}{
		{"classic", "classic", [2]float64{7, 7.5}},     // 4 + H, and any long poll that found nothing
		{"", "session", [2]float64{4, 5.5}},            // the default: every part, the workers' calls over sessions
		{"http", "http", [2]float64{4, 5.5}},           // every part over HTTP
		{"combined --h2c", "http", [2]float64{4, 5.5}}, // combined is http
		{"start,session", "start,session", [2]float64{6, 6.5}},
	} {
		args := []string{"bench", "--server", d.url, "--data", data, "--jobs", "300", "--workers", "8", "--enqueuers", "3", "-o", "json"}
		if flag, h2c := strings.CutSuffix(p.flag, " --h2c"); h2c {
			args = append(args, "--protocol", flag, "--h2c")
		} else if p.flag != "" {
			args = append(args, "--protocol", p.flag)
		}
		out, err := run(t, args...)
		if err != nil {
			t.Fatalf("bench: %v\n%s", err, out)
		}
		var r struct {
			Jobs          int                `json:"jobs"`
			Workers       int                `json:"workers"`
			Enqueuers     int                `json:"enqueuers"`
			Heartbeats    int                `json:"heartbeats"`
			Protocol      string             `json:"protocol"`
			HTTP          string             `json:"http"`
			CallsPerJob   float64            `json:"calls_per_job"`
			Seconds       float64            `json:"seconds"`
			JobsPerSecond float64            `json:"jobs_per_second"`
			Submit        map[string]float64 `json:"submit_ms"`
			Acquire       map[string]float64 `json:"acquire_ms"`
			Heartbeat     map[string]float64 `json:"heartbeat_ms"`
			Report        map[string]float64 `json:"report_ms"`
			Checked       bool               `json:"checked"`
			Check         string             `json:"check"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("not one JSON object: %v\n%s", err, out)
		}
		wantHTTP := "http1"
		if strings.HasSuffix(p.flag, "--h2c") {
			wantHTTP = "h2c"
		}
		if strings.Contains(p.name, "session") {
			wantHTTP += "+session"
		}
		if r.Jobs != 300 || r.Workers != 8 || r.Enqueuers != 3 || r.Heartbeats != 3 || r.Protocol != p.name || r.HTTP != wantHTTP {
			t.Errorf("parameters: %s", out)
		}
		if r.CallsPerJob < p.calls[0] || r.CallsPerJob >= p.calls[1] {
			t.Errorf("%s: %v calls a job, want %v to %v", p.name, r.CallsPerJob, p.calls[0], p.calls[1])
		}
		if !r.Checked || !strings.Contains(r.Check, "300/300 jobs reported exactly once") {
			t.Errorf("check: %s", out)
		}
		if r.Seconds <= 0 || r.JobsPerSecond <= 0 {
			t.Errorf("throughput: %s", out)
		}
		for name, l := range map[string]map[string]float64{"submit": r.Submit, "acquire": r.Acquire, "heartbeat": r.Heartbeat, "report": r.Report} {
			want := 300.0
			switch {
			case name == "heartbeat":
				want = 900
			case name == "submit" && (p.name == "http" || p.name == "session"):
				want = 3 // 100 jobs a call
			case name == "acquire" && (strings.Contains(p.name, "next") || p.name == "http" || p.name == "session"):
				want = l["count"] // those its reports carried have none
			}
			if l["count"] != want || l["count"] == 0 || l["p50"] <= 0 || l["p50"] > l["p90"] || l["p90"] > l["p99"] || l["p99"] > l["max"] {
				t.Errorf("%s_ms: %v", name, l)
			}
		}
	}
	// The table says the same.
	out, err := run(t, "bench", "--server", d.url, "--data", data, "--jobs", "20", "--workers", "2", "--heartbeats", "0")
	if err != nil || !strings.Contains(out, "20 jobs") || !strings.Contains(out, "heartbeat") || !strings.Contains(out, "check: 20/20 jobs reported exactly once") {
		t.Fatalf("bench: %v\n%s", err, out)
	}
}

// TestBenchFlags: bad flags are refused with a message, before any call.
func TestBenchFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--jobs", "0"}, "", "--jobs 0: want 1 to"},
		{[]string{"--workers", "-1"}, "", "--workers -1: want 1 to"},
		{[]string{"--enqueuers", "-2"}, "", "--enqueuers -2"},
		{[]string{"--heartbeats", "-1"}, "", "--heartbeats -1"},
		{[]string{"-o", "yaml"}, "", "-o yaml: want table or json"},
		{[]string{"--worker-id", "a b"}, "", "--worker-id"},
		{nil, "worker-token-0123456789", "give its --worker-id"},
		{[]string{"--worker-token-file", "/nonexistent/token"}, "", "--worker-token-file"},
		{[]string{"--jobs", "x"}, "", `invalid argument "x"`},
		{[]string{"--protocol", "fast"}, "", `--protocol "fast": want session, http, combined, classic, or a comma-separated list of start, next, batch, session`},
		{[]string{"--protocol", "start,,next"}, "", `--protocol "start,,next"`},
		{[]string{"--batch", "1001"}, "", "--batch 1001: want 1 to 1000"},
	} {
		if c.env != "" {
			t.Setenv("LEASELOG_WORKER_TOKEN", c.env)
		}
		out, err := run(t, append([]string{"bench", "--server", "http://127.0.0.1:1"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("bench %v: %v, want %q\n%s", c.args, err, c.want, out)
		}
	}
}

// TestBenchAuth: with [auth], the submits go with the admin token and the
// workers' calls with one worker's token (all workers act as its id); with
// the admin token alone the bench stops before it writes anything, saying
// why.
func TestBenchAuth(t *testing.T) {
	d := startServeConfig(t, t.TempDir(), benchConfig+`
[auth]
admin = ["admin-token-0123456789"]
[auth.workers]
wb = "wb-worker-token-0123456789"
`)
	t.Setenv("LEASELOG_TOKEN", "admin-token-0123456789")
	out, err := run(t, "bench", "--server", d.url, "--jobs", "20", "--workers", "2")
	if err == nil || !strings.Contains(err.Error(), "an admin token cannot act as a worker") {
		t.Fatalf("bench with the admin token alone: %v\n%s", err, out)
	}
	t.Setenv("LEASELOG_WORKER_TOKEN", "wb-worker-token-0123456789")
	out, err = run(t, "bench", "--server", d.url, "--jobs", "100", "--workers", "4", "--worker-id", "wb", "-o", "json")
	if err != nil || !strings.Contains(out, `"checked":true`) {
		t.Fatalf("bench with a worker token: %v\n%s", err, out)
	}
	c, err := api.NewClient(d.url, "admin-token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	if js, err := c.Jobs(context.Background(), "", ""); err != nil || len(js) != 100 {
		t.Fatalf("%d jobs (%v), want the 100 of the second run only", len(js), err)
	}
}
