package demo

// The steps of the tour, in order: each says what happens, makes it happen,
// and prints the events it appended.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/timing"
)

// expiry: w1 takes an evaluation and falls silent; its lease expires and the
// evaluation is queued again. It returns w1's grant.
func (x *demo) expiry(ctx context.Context) (api.Grant, error) {
	x.say("1. A worker dies during an evaluation.")
	if err := x.submit(ctx, "eval-1", "evaluation", "make eval"); err != nil {
		return api.Grant{}, err
	}
	g, err := x.take(ctx, "w1", "eval-1")
	if err != nil {
		return g, err
	}
	x.say("   eval-1 is submitted; w1 acquires it, lease %d, and starts it:", g.Lease)
	if err := x.events(ctx); err != nil {
		return g, err
	}
	x.say("   Then w1 falls silent, as a worker whose machine died. Silent past grace, it is unreachable;")
	x.say("   past toleration its lease expires, and the evaluation goes back to the queue: partial output")
	x.say("   is never scored.")
	if _, err := x.waitEvent(ctx, "lease.queued", "eval-1", g.Lease); err != nil {
		return g, err
	}
	return g, x.events(ctx)
}

// requeue: w2 takes the evaluation again, with a new token; it is killed,
// and w2 reports. It returns the answer to w2's report.
func (x *demo) requeue(ctx context.Context, first api.Grant) (api.ReportReply, error) {
	x.say("\n2. Another worker takes it, with a new fencing token.")
	g, err := x.take(ctx, "w2", "eval-1")
	if err != nil {
		return api.ReportReply{}, err
	}
	x.say("   w2 acquires eval-1, lease %d > %d, and starts it. We kill the job (leaselog kill eval-1),", g.Lease, first.Lease)
	x.say("   and w2's next heartbeat is answered:")
	if _, err := x.c.Kill(ctx, "eval-1"); err != nil {
		return api.ReportReply{}, err
	}
	hb, err := x.c.Heartbeat(ctx, "w2", []uint64{g.Lease})
	if err != nil {
		return api.ReportReply{}, err
	}
	x.answer(hb)
	if len(hb.Leases) != 1 || hb.Leases[0].Directive != api.DirectiveKill {
		return api.ReportReply{}, fmt.Errorf("demo: w2's heartbeat after the kill was answered %+v, not kill", hb.Leases)
	}
	x.say("   w2 reports it killed:")
	reply, err := x.c.Report(ctx, g.Lease, api.Report{Worker: "w2", Outcome: "killed"})
	if err != nil {
		return reply, err
	}
	x.answer(reply)
	return reply, x.events(ctx)
}

// lateReport: w1 reports its old lease; the report is refused and kept, and
// refused again the same way.
func (x *demo) lateReport(ctx context.Context, first api.Grant) error {
	x.say("\n3. w1 comes back and reports its old lease %d succeeded, with the ref of its commits:", first.Lease)
	late := api.Report{Worker: "w1", Outcome: "succeeded", Ref: fmt.Sprintf("refs/leaselog/eval-1/%d", first.Lease)}
	_, err := x.c.Report(ctx, first.Lease, late)
	var refused *api.Error
	if !errors.As(err, &refused) || refused.Code != api.CodeStaleLease {
		return fmt.Errorf("demo: the late report was answered %v, not %s", err, api.CodeStaleLease)
	}
	x.refusal(refused)
	x.say("   Refused, and kept as event %d for auditors:", refused.StaleReportSeq)
	if err := x.events(ctx); err != nil {
		return err
	}
	x.say("   Sent again, it gets the same answer, and nothing new is recorded:")
	_, err = x.c.Report(ctx, first.Lease, late)
	var again *api.Error
	if !errors.As(err, &again) || *again != *refused {
		return fmt.Errorf("demo: the late report sent again was answered %v, not as the first", err)
	}
	x.refusal(again)
	return x.events(ctx)
}

// sameReport: w2's report sent again gets the first answer, and changes
// nothing.
func (x *demo) sameReport(ctx context.Context, first api.ReportReply) error {
	x.say("\n4. w2's report, sent again (say its answer was lost on the way), gets the first answer:")
	reply, err := x.c.Report(ctx, first.Lease, api.Report{Worker: "w2", Outcome: "killed"})
	if err != nil {
		return err
	}
	x.answer(reply)
	if !reflect.DeepEqual(reply, first) {
		return fmt.Errorf("demo: the repeated report was answered %+v, the first %+v", reply, first)
	}
	x.say("   No new event, no second attempt:")
	return x.events(ctx)
}

// restart: the daemon's own worker runs an agent, and the daemon restarts
// under it; the worker re-attaches and the agent finishes.
func (x *demo) restart(ctx context.Context) error {
	// The Leases page's timing: the local worker's heartbeats come every
	// 10 s, none while the agent runs, so that every run prints the same.
	def := timing.Default()
	x.say("\n5. The daemon restarts with its own worker, local, on the Leases page's timings (renew %s,", secs(def.Renew))
	x.say("   grace %s, toleration %s). local runs an agent, and the daemon restarts under it.", secs(def.Grace), secs(def.Toleration))
	if err := x.restartDaemon(ctx, def, 1); err != nil {
		return err
	}
	signal := filepath.Join(x.Dir, "finish-agent")
	run := "while [ ! -e " + strconv.Quote(signal) + " ]; do sleep 0.05; done; echo the agent finished"
	if err := x.submit(ctx, "agent-1", "run", run); err != nil {
		return err
	}
	running, err := x.waitEvent(ctx, "lease.running", "agent-1", x.shown)
	if err != nil {
		return err
	}
	x.say("   agent-1 is submitted; %s takes it, lease %d, and starts it:", running.Worker, running.Lease)
	if err := x.events(ctx); err != nil {
		return err
	}
	x.say("   The daemon stops (its agents keep running) and starts again; local re-attaches to the agent")
	x.say("   and renews its lease, and we let the agent finish:")
	if err := x.restartDaemon(ctx, def, 1); err != nil {
		return err
	}
	// The agent finishes once local has re-attached (its first heartbeat,
	// at once), not before: a run found ended is reported without one.
	if _, err := x.waitEvent(ctx, "lease.heartbeat", "agent-1", running.Seq); err != nil {
		return err
	}
	if err := writeFile(signal); err != nil {
		return err
	}
	reported, err := x.waitEvent(ctx, "lease.reported", "agent-1", running.Seq)
	if err != nil {
		return err
	}
	if err := x.events(ctx); err != nil {
		return err
	}
	j, err := x.c.Job(ctx, "agent-1")
	if err != nil {
		return err
	}
	if reported.Lease != running.Lease {
		return fmt.Errorf("demo: agent-1 was reported on lease %d, not %d", reported.Lease, running.Lease)
	}
	x.say("   agent-1 is %s (%s), attempts %d, on the same lease %d across the restart.", j.State, j.Outcome, j.Attempts, running.Lease)
	return nil
}

// audit: the stale reports, as an auditor lists them.
func (x *demo) audit(ctx context.Context) error {
	x.say("\n6. The audit trail of stale reports (leaselog audit stale-reports):")
	page, err := x.c.Events(ctx, api.EventQuery{Type: "lease.stale_report"})
	if err != nil {
		return err
	}
	for _, e := range page.Events {
		x.event(e)
	}
	return nil
}
