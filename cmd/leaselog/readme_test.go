package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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
