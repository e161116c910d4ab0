package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// transcriptBlock is the README's curl walkthrough: the console block after
// the marker naming this file.
var transcriptBlock = regexp.MustCompile("(?s)<!-- transcript: cmd/leaselog/readme_test.go -->\n```console\n(.*?)```\n")

// step is a command of a transcript and the lines it prints.
type step struct {
	cmd  string
	want []string
}

// parseTranscript reads "$ command" lines, each followed by the lines it
// prints; "# " lines are notes.
func parseTranscript(t *testing.T, text string) []step {
	t.Helper()
	var steps []step
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "# "):
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, step{cmd: line[2:]})
		case len(steps) == 0:
			t.Fatalf("transcript: output %q before any command", line)
		default:
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
		}
	}
	return steps
}

// matches tells whether got is want, "…" in want standing for any text.
func matches(want, got string) bool {
	parts := strings.Split(want, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$").MatchString(got)
}

// TestREADMEWalkthrough runs the README's curl walkthrough against a
// daemon started as it says (no local worker; on a free port and a
// temporary directory), and checks that every command prints what the
// README shows, line for line.
func TestREADMEWalkthrough(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed: the README's walkthrough cannot run here")
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := transcriptBlock.FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no transcript block marked for this test")
	}
	steps := parseTranscript(t, string(m[1]))
	if len(steps) < 10 {
		t.Fatalf("the transcript has %d commands; want the walkthrough's", len(steps))
	}
	d := startServeConfig(t, t.TempDir(), "[server]\nlisten = \"127.0.0.1:0\"\n[plugins.executor]\nlocal_capacity = 0\n")
	u := strings.TrimPrefix(d.url, "http://")
	for _, s := range steps {
		cmd := exec.Command("sh", "-c", s.cmd)
		cmd.Env = childEnv("U=" + u)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("$ %s: %v\n%s", s.cmd, err, stderr.String())
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		ok := len(got) == len(s.want)
		for i := 0; ok && i < len(got); i++ {
			ok = matches(s.want[i], got[i])
		}
		if !ok {
			t.Fatalf("$ %s\nprinted:\n%s\nthe README shows:\n%s", s.cmd, strings.Join(got, "\n"), strings.Join(s.want, "\n"))
		}
	}
}

// TestTranscriptMatching pins the matching the walkthrough test relies on.
func TestTranscriptMatching(t *testing.T) {
	for _, tc := range []struct {
		want, got string
		ok        bool
	}{
		{`{"a":1,"t":"…"}`, `{"a":1,"t":"2026-12-04T07:51:06Z"}`, true},
		{`{"a":1,…}`, `{"a":1,"b":2}`, true},
		{`{"a":1}`, `{"a":2}`, false},
		{`201`, `200`, false},
		{`{"x":"…"}`, `{"x":"a"} trailing`, false},
	} {
		if matches(tc.want, tc.got) != tc.ok {
			t.Errorf("matches(%q, %q) = %v", tc.want, tc.got, !tc.ok)
		}
	}
}

// TestREADMEQuickStart follows the README's quick start with the CLI, as it
// says to (a daemon with its local worker and generated token, on the
// default timing as the README's reader has it — on a fast one a start
// slower than its renew puts a heartbeat before lease.running — and a gate
// file of the test's own instead of /tmp/go), and checks
// what the README shows: the agent on worker local under lease 3, the
// re-attach line the restarted daemon logs (its message and fields), the
// job reported succeeded, and its events under one lease throughout.
func TestREADMEQuickStart(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	quick := text[strings.Index(text, "## Quick start"):strings.Index(text, "## Walkthrough with curl")]
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	t.Cleanup(func() { killRuns(filepath.Join(data, "work")) })
	quickConfig := "[server]\nlisten = \"127.0.0.1:0\"\n[plugins.executor]\nlocal_capacity = 1\n[log]\nlevel = \"debug\"\n"
	d := startServeConfig(t, dir, quickConfig)
	gate := filepath.Join(dir, "go")
	cli := func(args ...string) string {
		t.Helper()
		out, _, err := runCLI(append(append([]string{args[0]}, "--server", d.url, "--data", data), args[1:]...)...)
		if err != nil {
			t.Fatalf("leaselog %v: %v", args, err)
		}
		return out
	}
	t.Setenv("LEASELOG_TOKEN", "")
	os.Unsetenv("LEASELOG_TOKEN")
	cli("submit", "--id", "agent-1", "--kind", "run", "--", fmt.Sprintf("while [ ! -e %q ]; do sleep 0.1; done; echo done", gate))
	waitFor(t, "agent-1 running", func() bool { return job(t, d.c, "agent-1").State == "running" })
	if !strings.Contains(quick, `leaselog leases                # agent-1 runs on the built-in worker "local", lease 3`) {
		t.Fatal("the README's quick start no longer says where agent-1 runs: update this test")
	}
	if row := strings.Fields(strings.Split(cli("leases"), "\n")[1]); len(row) < 4 || row[0] != "3" || row[1] != "agent-1" || row[3] != "local" {
		t.Fatalf("leases: %v; the README says agent-1 on local, lease 3", row)
	}

	d.signal(syscall.SIGKILL)
	d.wait()
	d = startServeConfig(t, dir, quickConfig)
	line := regexp.MustCompile("(?m)^INF (local: re-attached) (.*)$").FindStringSubmatch(quick)
	if line == nil {
		t.Fatal("the README's quick start shows no re-attach line")
	}
	waitFor(t, "the re-attach line", func() bool { return strings.Contains(d.output(), `"message":"local: re-attached"`) })
	var logged map[string]any
	for _, l := range strings.Split(d.output(), "\n") {
		if strings.Contains(l, `"message":"local: re-attached"`) {
			if err := json.Unmarshal([]byte(l), &logged); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, kv := range strings.Fields(line[2]) {
		k, v, _ := strings.Cut(kv, "=")
		got, ok := logged[k]
		if !ok || (k != "pid" && fmt.Sprint(got) != v) {
			t.Errorf("the README's re-attach line has %s=%s; the daemon logged %v", k, v, logged)
		}
	}
	if len(logged) != len(strings.Fields(line[2]))+3 { // and level, time, message
		t.Errorf("the daemon's re-attach line %v has other fields than the README's %q", logged, line[2])
	}

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "agent-1 reported", func() bool { return job(t, d.c, "agent-1").State == "reported" })
	if !strings.Contains(quick, "leaselog jobs                  # agent-1  run  reported  …  1  succeeded") {
		t.Fatal("the README's quick start no longer shows agent-1's row: update this test")
	}
	row := strings.Join(strings.Fields(strings.Split(cli("jobs"), "\n")[1]), " ")
	if !regexp.MustCompile(`^agent-1 run reported .* 1 succeeded\b`).MatchString(row) {
		t.Fatalf("jobs: %q; the README shows agent-1 run reported … 1 succeeded", row)
	}
	var types []string
	for _, l := range strings.Split(strings.TrimSpace(cli("events", "--job", "agent-1", "-o", "json")), "\n") {
		var e struct {
			Type  string
			Lease uint64
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		if e.Type != "lease.queued" && e.Lease != 3 {
			t.Errorf("event %s under lease %d; the README says lease 3 throughout", e.Type, e.Lease)
		}
		if len(types) == 0 || types[len(types)-1] != e.Type {
			types = append(types, e.Type)
		}
	}
	if want := []string{"lease.queued", "lease.acquired", "lease.running", "lease.heartbeat", "lease.reported"}; !slices.Equal(types, want) {
		t.Errorf("events of agent-1: %v; the README says %v", types, want)
	}
}
