package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/projection"
)

// The checks of every report's answer (invariants 4 and 5 of check.go):
// what a report was answered, against the log and the table around it.

// views is the table as the report check compares it.
type views struct {
	jobs    []projection.Job
	leases  []projection.Lease
	workers []projection.Worker
}

// views reads them through the service, which answers from the table and
// the archive.
func (k *checker) views() views {
	var v views
	d := k.s.daemon
	_ = d.svc.View(bg, func(t *projection.Table) { v.workers = t.Workers() })
	var err error
	if v.jobs, err = d.svc.Jobs(bg, projection.JobFilter{}); err != nil {
		k.s.fail("list jobs: %v", err)
	}
	for _, st := range []fsm.State{fsm.Acquired, fsm.Running, fsm.Reported, fsm.Expired} {
		ls, err := d.svc.Leases(bg, projection.LeaseFilter{State: st})
		if err != nil {
			k.s.fail("list %s leases: %v", st, err)
		}
		v.leases = append(v.leases, ls...)
	}
	return v
}

// report: a stale report changes nothing in the table, is recorded with
// what it said, and the same one is answered the same; an accepted report's
// answer never changes, and a report answered with it is a retry of the
// report it records; a late claim, a report on a reported lease that is no
// retry of its first, is stale.
func (k *checker) report(r reqReport, before views, reply any, err error) {
	var ae *api.Error
	switch {
	case err == nil:
		a := reply.(api.ReportReply)
		first, answered := k.answers[r.lease]
		if answered && first != a.Seq {
			k.s.fail("lease %d: first answer seq %d, now seq %d", r.lease, first, a.Seq)
		}
		k.answers[r.lease] = a.Seq
		// The answer is the record of the report this one is (a retry of):
		// lease.lost for a loss, lease.reported for the rest.
		e, gerr := k.s.daemon.log.Get(a.Seq)
		if gerr != nil || (e.Type != event.TypeReported && e.Type != event.TypeLost) || e.Lease != r.lease || !retryOf(&e, r.r) {
			k.s.fail("report on lease %d (%s ref=%q result=%s) answered seq %d, which holds %s (%v): not the report it repeats",
				r.lease, r.r.Outcome, r.r.Ref, r.r.Result, a.Seq, e.String(), gerr)
		}
	case errors.As(err, &ae) && ae.Code == api.CodeStaleLease:
		after := k.views()
		if !reflect.DeepEqual(after.jobs, before.jobs) || !reflect.DeepEqual(after.leases, before.leases) || !slices.Equal(after.workers, before.workers) {
			k.s.fail("a stale report on lease %d changed the table", r.lease)
		}
		e, gerr := k.s.daemon.log.Get(ae.StaleReportSeq)
		if gerr != nil || e.Type != event.TypeStaleReport || e.Lease != r.lease || e.Worker != r.r.Worker ||
			e.Outcome.String() != r.r.Outcome || e.Ref != r.r.Ref || e.Reason != r.r.Reason || string(e.Result) != compact(r.r.Result) {
			k.s.fail("stale report on lease %d answered seq %d, which holds %s (%v)", r.lease, ae.StaleReportSeq, e.String(), gerr)
		}
		key := fmt.Sprint(r.lease, r.r.Worker, r.r.Outcome, r.r.Ref, r.r.Reason, compact(r.r.Result))
		if first, ok := k.stale[key]; ok && first != ae.StaleReportSeq {
			k.s.fail("the same stale report on lease %d answered seq %d, then seq %d", r.lease, first, ae.StaleReportSeq)
		}
		k.stale[key] = ae.StaleReportSeq
		// On a lease reported, a stale report is a late claim: no retry of
		// the first report.
		for _, l := range before.leases {
			if l.ID != r.lease || l.ReportSeq == 0 {
				continue
			}
			k.s.stats.Claims++
			if fe, gerr := k.s.daemon.log.Get(l.ReportSeq); gerr != nil || retryOf(&fe, r.r) {
				k.s.fail("a report on lease %d (%s ref=%q) answered stale, though it repeats the first, seq %d: %s (%v)",
					r.lease, r.r.Outcome, r.r.Ref, l.ReportSeq, fe.String(), gerr)
			}
		}
	}
}

// retryOf reports whether report r repeats the report first records (its
// lease.reported or lease.lost): the same outcome, and a ref and a result
// each left out or first's. The reason, free text, is not compared.
func retryOf(first *event.Event, r api.Report) bool {
	outcome := first.Outcome
	if first.Type == event.TypeLost {
		outcome = event.OutcomeLost
	}
	return r.Outcome == outcome.String() && (r.Ref == "" || r.Ref == first.Ref) &&
		(compact(r.Result) == "" || compact(r.Result) == string(first.Result))
}

// compact is a result as the daemon keeps it: compact JSON, "" for none.
func compact(result []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, result); err != nil {
		return string(result)
	}
	return b.String()
}
