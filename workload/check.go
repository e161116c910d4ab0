package workload

// The exactly-once check: the log read back after the run.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/leaselog/leaselog/api"
)

// check reads back the log after seq0: every job of the run must have
// exactly one lease.reported, succeeded, and the run one accepted report per
// job, no refused report, no lost heartbeat. Its error names the jobs.
func (b *bench) check(ctx context.Context) (string, error) {
	reported := make([]int, b.Jobs)
	var stale []string
	var bad []string // reported with another outcome
	for _, typ := range []string{"lease.reported", "lease.stale_report"} {
		q := api.EventQuery{Type: typ, After: b.seq0, Limit: 1000}
		for {
			page, err := b.Admin.Events(ctx, q)
			if err != nil {
				return "", fmt.Errorf("check: read %s events: %w", typ, err)
			}
			for _, e := range page.Events {
				i := b.jobIndex(e.Job)
				switch {
				case i < 0:
				case typ == "lease.stale_report":
					stale = append(stale, e.Job)
				case e.Outcome != "succeeded":
					bad = append(bad, e.Job+" ("+e.Outcome+")")
					reported[i]++
				default:
					reported[i]++
				}
			}
			if page.Next == 0 { // the last page
				break
			}
			q.After = page.Next
		}
	}
	return checkCounts(b, reported, stale, bad)
}

// checkCounts judges what check read and what the run counted.
func checkCounts(b *bench, reported []int, stale, bad []string) (string, error) {
	var missing, twice, acc []string
	for i, n := range reported {
		switch {
		case n == 0:
			missing = append(missing, b.jobID(i))
		case n > 1:
			twice = append(twice, fmt.Sprintf("%s (%d)", b.jobID(i), n))
		}
		if a := b.accepted[i].Load(); a != 1 {
			acc = append(acc, fmt.Sprintf("%s (%d)", b.jobID(i), a))
		}
	}
	var problems []string
	add := func(what string, jobs []string) {
		if len(jobs) > 0 {
			problems = append(problems, fmt.Sprintf("%d %s: %s", len(jobs), what, names(jobs)))
		}
	}
	add("jobs with no lease.reported", missing)
	add("jobs with more than one lease.reported", twice)
	add("jobs reported with an outcome other than succeeded", bad)
	add("stale reports", stale)
	add("jobs whose accepted reports in this run were not one", acc)
	if n := b.rejected.Load(); n > 0 {
		problems = append(problems, fmt.Sprintf("%d reports refused by the token check", n))
	}
	if n := b.lost.Load(); n > 0 {
		problems = append(problems, fmt.Sprintf("%d heartbeats not answered continue", n))
	}
	if len(problems) > 0 {
		return "", fmt.Errorf("check failed: %s", strings.Join(problems, "; "))
	}
	return fmt.Sprintf("%d/%d jobs reported exactly once (succeeded), each with one accepted report; 0 stale reports", b.Jobs, b.Jobs), nil
}

// names lists up to 10 names and how many more.
func names(s []string) string {
	slices.Sort(s)
	if len(s) <= 10 {
		return strings.Join(s, ", ")
	}
	return strings.Join(s[:10], ", ") + fmt.Sprintf(" and %d more", len(s)-10)
}
