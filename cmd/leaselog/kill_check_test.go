package main

// The accounting of TestKillUnderLoad: the clients' records held against the
// log, Jepsen-style. An operation that definitely failed (refused, or
// answered 4xx) can have made nothing; one that was acknowledged must have
// made what it was told; one whose answer was lost (or is still coming) may
// have made anything it asked for, or nothing.

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/ops"
)

// tally is one check's count.
type tally struct {
	ops, acked, refused, indeterminate int
	lost, unexpected                   int
	events                             int
	problems                           []string
}

func (s tally) String() string {
	return fmt.Sprintf("operations=%d acknowledged=%d refused=%d indeterminate=%d lost=%d unexpected=%d events=%d",
		s.ops, s.acked, s.refused, s.indeterminate, s.lost, s.unexpected, s.events)
}

// checkHistory holds the records of h against log, which must extend prev
// (the log as the previous check read it) unchanged, and fails the test on
// any problem, the clients' own included. It returns log and the count.
func checkHistory(t *testing.T, h *ledger, prev, log []api.Event, when string) ([]api.Event, tally) {
	t.Helper()
	ops, violations := h.snapshot()
	s := account(ops, log)
	// What the previous check read was served, so acknowledged, too.
	if len(log) < len(prev) {
		s.lost++
		s.problems = append(s.problems, fmt.Sprintf("lost: the log ends at seq %d; it had served up to %d", len(log), len(prev)))
	}
	for i := range min(len(prev), len(log)) {
		if a, b := prev[i], log[i]; a.ID != b.ID || a.Type != b.Type {
			s.lost++
			s.problems = append(s.problems, fmt.Sprintf("lost: seq %d changed across a crash: %s %s, was %s %s", b.Seq, b.Type, b.ID, a.Type, a.ID))
		}
	}
	s.problems = append(s.problems, violations...)
	t.Logf("%s: %s", when, s)
	if len(s.problems) > 0 {
		t.Fatalf("%s: %d problems:\n%s", when, len(s.problems), strings.Join(s.problems[:min(len(s.problems), 40)], "\n"))
	}
	return log, s
}

// wl is a lease as one worker holds it.
type wl struct {
	worker string
	lease  uint64
}

// account counts ops and holds them against log.
func account(ops []op, log []api.Event) tally {
	s := tally{events: len(log)}
	problem := func(format string, args ...any) { s.problems = append(s.problems, fmt.Sprintf(format, args...)) }
	lost := func(format string, args ...any) { s.lost++; problem("lost: "+format, args...) }
	unexpected := func(format string, args ...any) { s.unexpected++; problem("unexpected: "+format, args...) }
	for i, e := range log {
		if e.Seq != uint64(i+1) {
			problem("seq %d at position %d of the log: a gap", e.Seq, i+1)
			return s
		}
	}
	at := func(seq uint64) api.Event {
		if seq == 0 || seq > uint64(len(log)) {
			return api.Event{}
		}
		return log[seq-1]
	}

	// What the operations may have made (all but definite failures), and
	// which tokens they were told.
	submitted := map[string]bool{}
	maybeAcquired := map[string]int{} // by worker: leases its unanswered acquires may have taken
	toldTo := map[uint64]string{}     // by acquires and listings
	acquiredBy := map[uint64]string{} // by acquires: what made each lease
	acquiredTold := map[uint64]int{}
	started := map[wl]bool{}
	beats, beatsTold := map[wl]int{}, map[wl]int{}
	reports := map[wl][]api.Report{}
	for _, o := range ops {
		s.ops++
		switch o.res {
		case resOK:
			s.acked++
		case resFail:
			s.refused++
		default:
			s.indeterminate++
		}
		if o.res == resFail {
			continue
		}
		k := wl{o.worker, o.lease}
		switch o.kind {
		case "submit":
			submitted[o.job] = true
		case "acquire", "leases":
			if o.res != resOK {
				if o.kind == "acquire" {
					maybeAcquired[o.worker] += o.max
				}
				continue
			}
			for _, g := range o.ans.grants {
				if w, ok := toldTo[g.Lease]; ok && w != o.worker {
					problem("token %d told to %s and to %s", g.Lease, w, o.worker)
				}
				toldTo[g.Lease] = o.worker
				if o.kind == "acquire" {
					acquiredBy[g.Lease] = o.worker
					if acquiredTold[g.Lease]++; acquiredTold[g.Lease] == 2 {
						problem("token %d (job %s) granted twice to %s", g.Lease, g.Job.ID, o.worker)
					}
				}
			}
		case "start":
			started[k] = true
		case "heartbeat":
			beats[k]++
			for _, d := range o.ans.dirs {
				switch d.Directive {
				case "continue":
					beatsTold[k]++
				case "gone":
				default:
					unexpected("directive %q for lease %d: nothing revoked it", d.Directive, d.Lease)
				}
			}
		case "report":
			reports[k] = append(reports[k], o.report)
		}
	}

	// What the log holds, and whether some operation may have made it.
	jobKind := map[string]string{}
	acquiredOf, reportedOf := map[string]int{}, map[string]int{}
	live, lastToken := map[string]uint64{}, map[string]uint64{}
	running, beatsLogged := map[wl]bool{}, map[wl]int{}
	unmatched := map[string]int{}
	for _, e := range log {
		k := wl{e.Worker, e.Lease}
		switch e.Type {
		case "lease.queued":
			if e.Kind == "" {
				continue // an evaluation queued again after its lease expired
			}
			jobKind[e.Job] = e.Kind
			if !submitted[e.Job] {
				unexpected("job %s (seq %d), which no submit may have made", e.Job, e.Seq)
			}
		case "lease.acquired":
			acquiredOf[e.Job]++
			if e.Lease != e.Seq || e.Lease <= lastToken[e.Job] {
				problem("job %s: token %d at seq %d, after token %d", e.Job, e.Lease, e.Seq, lastToken[e.Job])
			}
			if l := live[e.Job]; l != 0 {
				problem("job %s: lease %d acquired while lease %d is live", e.Job, e.Lease, l)
			}
			lastToken[e.Job], live[e.Job] = e.Lease, e.Lease
			// A lease no acquire's answer told of: one of those that went
			// unanswered made it (a listing may tell of it later, but lists
			// what exists: it makes nothing).
			if w, ok := acquiredBy[e.Lease]; !ok {
				unmatched[e.Worker]++
			} else if w != e.Worker {
				problem("lease %d acquired by %s, told to %s", e.Lease, e.Worker, w)
			}
		case "lease.running":
			running[k] = true
			if !started[k] {
				unexpected("lease %d running (seq %d), which %s never started", e.Lease, e.Seq, e.Worker)
			}
		case "lease.heartbeat":
			beatsLogged[k]++
		case "lease.reported", "lease.stale_report":
			if !containsReport(reports[k], e) {
				unexpected("%s of lease %d by %s (seq %d, %s %q), which was never sent", e.Type, e.Lease, e.Worker, e.Seq, e.Outcome, e.Ref)
			}
			if e.Type == "lease.reported" {
				reportedOf[e.Job]++
				live[e.Job] = 0
			}
		case "lease.expired":
			live[e.Job] = 0
		case "daemon.started", "daemon.resumed", "worker.unreachable", "worker.reachable":
		default:
			unexpected("%s (seq %d): nothing in this run asks for it", e.Type, e.Seq)
		}
	}
	for w, n := range unmatched {
		if n > maybeAcquired[w] {
			unexpected("%d leases acquired by %s that no answer told, from %d unanswered acquires", n, w, maybeAcquired[w])
		}
	}
	for k, n := range beatsLogged {
		if n > beats[k] {
			unexpected("%d heartbeats of lease %d by %s in the log, %d sent", n, k.lease, k.worker, beats[k])
		}
	}
	for k, n := range beatsTold {
		if beatsLogged[k] < n {
			lost("%d heartbeats of lease %d by %s acknowledged, %d in the log", n, k.lease, k.worker, beatsLogged[k])
		}
	}

	// Everything acknowledged is in the log, as it was told.
	for _, o := range ops {
		if o.res != resOK {
			continue
		}
		switch o.kind {
		case "submit":
			if jobKind[o.job] != o.jobKind {
				lost("submit of %s %s (acknowledged by daemon %d): the log has %q", o.jobKind, o.job, o.gen, jobKind[o.job])
			}
		case "read":
			if j := o.ans.job; jobKind[j.ID] == "" || acquiredOf[j.ID] < j.Leases || reportedOf[j.ID] < j.Attempts {
				lost("job %s read with %d leases, %d attempts; the log has %d, %d", j.ID, j.Leases, j.Attempts, acquiredOf[j.ID], reportedOf[j.ID])
			}
		case "acquire", "leases":
			for _, g := range o.ans.grants {
				if e := at(g.Lease); e.Type != "lease.acquired" || e.Job != g.Job.ID || e.Worker != o.worker {
					lost("lease %d of job %s told to %s (%s, daemon %d): the log has %s %s %s", g.Lease, g.Job.ID, o.worker, o.kind, o.gen, e.Type, e.Job, e.Worker)
				}
			}
		case "start":
			if !running[wl{o.worker, o.lease}] {
				lost("start of lease %d by %s (daemon %d)", o.lease, o.worker, o.gen)
			}
		case "audit":
			for _, l := range o.ans.table {
				if e := at(l.Lease); e.Type != "lease.acquired" || e.Job != l.Job || e.Worker != l.Worker || (l.State == "running" && !running[wl{l.Worker, l.Lease}]) {
					lost("lease %d of job %s, %s on %s, as daemon %d listed it: the log has %s %s %s", l.Lease, l.Job, l.State, l.Worker, o.gen, e.Type, e.Job, e.Worker)
				}
			}
			for _, served := range o.ans.events {
				if e := at(served.Seq); e.ID != served.ID || e.Type != served.Type {
					lost("event seq %d (%s %s) as daemon %d served it: the log has %s %s", served.Seq, served.Type, served.ID, o.gen, e.Type, e.ID)
				}
			}
		case "report":
			want := "lease.reported"
			if o.ans.stale {
				want = "lease.stale_report"
			}
			if e := at(o.ans.seq); e.Type != want || e.Lease != o.lease || e.Worker != o.worker || !containsReport([]api.Report{o.report}, e) {
				lost("%s of lease %d by %s at seq %d (daemon %d): the log has %s", want, o.lease, o.worker, o.ans.seq, o.gen, e.Type)
			}
		}
	}
	return s
}

func containsReport(rs []api.Report, e api.Event) bool {
	for _, r := range rs {
		if r.Outcome == e.Outcome && r.Ref == e.Ref && r.Reason == e.Reason && string(r.Result) == string(e.Result) {
			return true
		}
	}
	return false
}

// readLog reads the whole log from a running daemon, a page at a time.
func readLog(t *testing.T, c *api.Client) []api.Event {
	t.Helper()
	var out []api.Event
	for {
		p, err := c.Events(context.Background(), api.EventQuery{After: uint64(len(out)), Limit: 1000})
		if err != nil {
			t.Fatalf("read the log: %v", err)
		}
		if len(p.Events) == 0 {
			return out
		}
		out = append(out, p.Events...)
	}
}

// readOffline reads the whole log of a stopped daemon with package eventlog.
func readOffline(t *testing.T, data string) []api.Event {
	t.Helper()
	log, err := eventlog.Open(data, eventlog.Options{ReadOnly: true, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	var out []api.Event
	it := log.Iter(1)
	for it.Next() {
		out = append(out, ops.EventOf(it.Event()))
	}
	if err := it.Close(); err != nil {
		t.Fatalf("read the log offline: %v", err)
	}
	return out
}

// opsByKind and eventsByType say what a run exercised.
func opsByKind(ops []op) map[string]int {
	m := map[string]int{}
	for _, o := range ops {
		m[o.kind+"/"+[]string{"pending", "ok", "fail", "info"}[o.res]]++
	}
	return m
}

func eventsByType(log []api.Event) map[string]int {
	m := map[string]int{}
	for _, e := range log {
		m[e.Type]++
	}
	return m
}
