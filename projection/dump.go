package projection

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/timing"
)

// Dump writes the whole table as text, one line per worker, job and lease,
// sorted, with times in UTC; what it retired too, in RetireKeep mode. It is what golden files and `leaselog replay`
// print, and what a failed equality check shows.
func (t *Table) Dump(w io.Writer) {
	fmt.Fprintf(w, "seq=%d absence=%s queued=%d live=%d\n", t.seq, time.Duration(t.absence), len(t.Queued(0)), t.nlive)
	for _, x := range t.Workers() {
		state := "reachable"
		if x.Unreachable {
			state = "unreachable"
		}
		fmt.Fprintf(w, "worker %s %s live=%d seen=%s\n", x.ID, state, x.Live, fmtTime(x.Seen))
	}
	for _, j := range t.Jobs(JobFilter{}) {
		fmt.Fprintf(w, "job %s %s %s attempts=%d leases=%d", j.ID, j.Kind, j.State, j.Attempts, j.Leases)
		if j.Lease != 0 {
			fmt.Fprintf(w, " lease=%d", j.Lease)
		}
		if j.MaxRequeues != 0 {
			fmt.Fprintf(w, " max_requeues=%d", j.MaxRequeues)
		}
		if j.Labels != "" {
			fmt.Fprintf(w, " labels=%s", j.Labels)
		}
		if j.Priority != 0 {
			fmt.Fprintf(w, " priority=%d", j.Priority)
		}
		if j.NotBefore != 0 {
			fmt.Fprintf(w, " not_before=%s", fmtTime(j.NotBefore))
		}
		if j.Timing != (timing.Config{}) {
			fmt.Fprintf(w, " timing=%s", event.TimingString(j.Timing))
		}
		if j.Outcome != 0 {
			fmt.Fprintf(w, " outcome=%s", j.Outcome)
		}
		if j.Reason != "" {
			fmt.Fprintf(w, " reason=%q", j.Reason)
		}
		if j.Ref != "" {
			fmt.Fprintf(w, " ref=%s", j.Ref)
		}
		fmt.Fprintln(w)
	}
	leases := make([]Lease, 0, len(t.leases)+len(t.retired.leases))
	for _, l := range t.leases {
		leases = append(leases, l.view())
	}
	for _, l := range t.retired.leases {
		leases = append(leases, l)
	}
	slices.SortFunc(leases, func(a, b Lease) int { return cmp.Compare(a.ID, b.ID) })
	for _, l := range leases {
		fmt.Fprintf(w, "lease %d job=%s worker=%s %s heard=%s", l.ID, l.Job, l.Worker, l.State, fmtTime(l.Heard))
		if l.Mode != 0 {
			fmt.Fprintf(w, " revoke=%s", l.Mode)
		}
		if l.ReportSeq != 0 {
			fmt.Fprintf(w, " report=%d", l.ReportSeq)
		}
		if l.Timing != (timing.Config{}) {
			fmt.Fprintf(w, " timing=%s", event.TimingString(l.Timing))
		}
		if len(l.Details) != 0 {
			fmt.Fprintf(w, " details=%s", l.Details)
		}
		fmt.Fprintln(w)
	}
	stale := make([]uint64, 0, len(t.stale))
	for _, seq := range t.stale {
		stale = append(stale, seq)
	}
	slices.Sort(stale)
	for _, seq := range stale {
		fmt.Fprintf(w, "stale_report seq=%d\n", seq)
	}
}

// String is Dump into a string.
func (t *Table) String() string {
	var b strings.Builder
	t.Dump(&b)
	return b.String()
}

func fmtTime(ns int64) string {
	return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
