package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/server"
)

// pagedDaemon is an in-process daemon with 7 jobs (j0…j6, submitted in
// reverse) and 3 live leases, and the flags that reach it.
func pagedDaemon(t *testing.T) []string {
	t.Helper()
	_, svc := leasetest.Open(t)
	ctx := context.Background()
	for i := 6; i >= 0; i-- {
		if _, _, err := svc.Submit(ctx, fmt.Sprintf("j%d", i), event.KindRun, []byte(`{"run":"true"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Acquire(ctx, "w1", 3); err != nil {
		t.Fatal(err)
	}
	srv := server.New(svc, server.Options{})
	ts := httptest.NewServer(srv)
	t.Cleanup(func() { srv.Close(); ts.Close() })
	// An open daemon: no token, whatever the environment holds.
	t.Setenv("LEASELOG_TOKEN", "")
	os.Unsetenv("LEASELOG_TOKEN")
	return []string{"--server", ts.URL, "--data", t.TempDir(), "-o", "json"}
}

// runCLI runs a command line in process, returning its stdout and stderr.
func runCLI(args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	err := (&Main{Stdout: &out, Stderr: &errOut}).Run(context.Background(), args)
	return out.String(), errOut.String(), err
}

// keys are the values of field in the JSON lines of out.
func keys(t *testing.T, out, field string) []string {
	t.Helper()
	var ks []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		ks = append(ks, fmt.Sprint(m[field]))
	}
	return ks
}

var moreLine = regexp.MustCompile(`^more (\w+( \w+)?) follow: add --after (\S+) for the next page, or --all for every one\n$`)

// TestListCommandsPage: a list command shows one page and tells how to see
// the next; --after shows it; --all shows every page, whatever their size.
func TestListCommandsPage(t *testing.T) {
	flags := pagedDaemon(t)
	jobs := []string{"j0", "j1", "j2", "j3", "j4", "j5", "j6"}
	events := []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"} // started, 7 queued, 3 acquired
	for _, tc := range []struct {
		cmd, field string
		want       []string
	}{
		{"jobs", "id", jobs},
		{"leases", "lease", []string{"9", "10", "11"}},
		{"events", "seq", events},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			// Every page, two at a time, and in pages of 1000.
			for _, extra := range [][]string{{"--all", "--limit", "2"}, {"--all"}} {
				out, errOut, err := runCLI(append(append([]string{tc.cmd}, flags...), extra...)...)
				if err != nil || errOut != "" {
					t.Fatalf("%s %v: %v\n%s", tc.cmd, extra, err, errOut)
				}
				if got := keys(t, out, tc.field); !slices.Equal(got, tc.want) {
					t.Fatalf("%s %v: %v, want %v", tc.cmd, extra, got, tc.want)
				}
			}
			// One page at a time, following the footer's --after.
			var got []string
			args := append([]string{tc.cmd, "--limit", "2"}, flags...)
			for pages := 1; ; pages++ {
				out, errOut, err := runCLI(args...)
				if err != nil {
					t.Fatalf("%v: %v", args, err)
				}
				page := keys(t, out, tc.field)
				got = append(got, page...)
				if errOut == "" {
					break
				}
				m := moreLine.FindStringSubmatch(errOut)
				if m == nil || len(page) != 2 {
					t.Fatalf("%v: %d rows and stderr %q: want 2 rows and how to see more", args, len(page), errOut)
				}
				args = append([]string{tc.cmd, "--limit", "2", "--after", m[3]}, flags...)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("%s page by page: %v, want %v", tc.cmd, got, tc.want)
			}
		})
	}
}

// TestListCommandsRefuseBadPaging: a limit out of range is refused before
// any call, a cursor that is not one by the daemon, each with a message.
func TestListCommandsRefuseBadPaging(t *testing.T) {
	flags := pagedDaemon(t)
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"jobs", "--limit", "0"}, "--limit 0: want 1 to 1000"},
		{[]string{"leases", "--limit", "1001"}, "--limit 1001: want 1 to 1000"},
		{[]string{"events", "--limit", "-1", "--all"}, "--limit -1"},
		{[]string{"jobs", "--after", "!"}, `after "!"`},
		{[]string{"leases", "--after", "x"}, `after "x"`},
		{[]string{"events", "--after", "x"}, `--after "x"`},
	} {
		out, _, err := runCLI(append(tc.args, flags...)...)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.says)
		}
		if strings.Contains(out, "{") {
			t.Errorf("%v: printed rows %q", tc.args, out)
		}
	}
}
