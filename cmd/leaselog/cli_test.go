package main

import (
	"bytes"
	"context"
	"errors"

	"strings"
	"testing"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
)

// unreachable is the flags of a client command aimed at no daemon.
var unreachable = []string{"--server", "127.0.0.1:1", "--token", "nobody-token-0000001"}

// TestFailingListPrintsNoHeader: a list that fails before its first row
// prints its error only, not a table header above it; one that succeeds
// with no rows prints the header.
func TestFailingListPrintsNoHeader(t *testing.T) {
	for _, cmd := range [][]string{{"jobs"}, {"leases"}, {"events"}, {"audit", "stale-reports"}} {
		out, _, err := runCLI(append(cmd, unreachable...)...)
		if err == nil {
			t.Fatalf("%s against no daemon: no error", cmd)
		}
		if out != "" {
			t.Errorf("%s against no daemon printed %q before its error", cmd, out)
		}
	}
	flags := pagedDaemon(t)
	flags = flags[:len(flags)-2] // a table, not JSON
	out, _, err := runCLI(append([]string{"jobs", "--state", "cancelled"}, flags...)...)
	if err != nil || !strings.HasPrefix(out, "JOB ") || strings.Count(out, "\n") != 1 {
		t.Fatalf("jobs with no rows: %q, %v; want the header alone", out, err)
	}
}

// TestPrinterKeepsColumnsRowByRow: rows flushed one at a time, as `events
// --follow` does, start each column where the rows before them did.
func TestPrinterKeepsColumnsRowByRow(t *testing.T) {
	var out bytes.Buffer
	p := (&clientFlags{output: "table"}).printer(&out, "SEQ", "TYPE", "JOB")
	p.minWidths("1234567", "lease.stale_report")
	for _, r := range [][]any{{1, "daemon.started", "-"}, {2, "job.submitted", "j1"}, {12345, "lease.stale_report", "a-long-job-id"}, {12346, "job.ended", "j"}} {
		p.row(nil, r...)
		p.flush()
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines, want a header and 4 rows:\n%s", len(lines), out.String())
	}
	typeAt, jobAt := strings.Index(lines[0], "TYPE"), strings.Index(lines[0], "JOB")
	for _, l := range lines[1:] {
		fields := strings.Fields(l)
		if strings.Index(l, fields[1]) != typeAt || strings.LastIndex(l, fields[2]) != jobAt {
			t.Errorf("row %q is out of the header's columns (TYPE at %d, JOB at %d):\n%s", l, typeAt, jobAt, out.String())
		}
	}
}

// TestSubmitRefusesMissingFlagsLocally: what the CLI can tell is missing
// fails before any call (the server here answers nothing).
func TestSubmitRefusesMissingFlagsLocally(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"submit", "--kind", "run", "--", "true"}, "--id is required"},
		{[]string{"submit", "--id", "j1", "--", "true"}, "--kind is required"},
		{[]string{"submit", "--id", "j1", "--kind", "run"}, "give the command to run"},
	} {
		args := append(append([]string{tc.args[0]}, unreachable...), tc.args[1:]...) // flags before --
		_, _, err := runCLI(args...)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%v: %v; want an error saying %q", tc.args, err, tc.says)
		}
	}
}

// TestRevokeOfAnEndedJob: cancel or kill of a job that had ended fails
// with errEnded, saying how it ended; the same revoke again (a retry of
// the first) is no error.
func TestRevokeOfAnEndedJob(t *testing.T) {
	flags, svc := pagedService(t) // j0…j3 queued; j6, j5, j4 leased to w1
	ctx := context.Background()
	if _, err := svc.Report(ctx, "w1", 9, lease.Report{Outcome: event.OutcomeSucceeded}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		says string // "": no error
	}{
		{[]string{"cancel", "j3"}, ""},
		{[]string{"cancel", "j3"}, ""},
		{[]string{"kill", "j3"}, `(cancelled: "cancelled"): nothing to kill`},
		{[]string{"kill", "j2"}, ""},
		{[]string{"cancel", "j2"}, `(cancelled: "killed"): nothing to cancel`},
		{[]string{"kill", "j6"}, "(reported succeeded): nothing to kill"},
	} {
		_, _, err := runCLI(append(tc.args, flags...)...)
		switch {
		case tc.says == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.says != "" && (!errors.Is(err, errEnded) || !strings.Contains(err.Error(), tc.says)):
			t.Errorf("%v: %v; want errEnded saying %q", tc.args, err, tc.says)
		}
	}
}
