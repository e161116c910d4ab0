package worker

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/leaselog/leaselog/api"
)

// TestCoreScenarios plays the files of testdata/core against a Core, on a
// clock that reads as offsets from t0. A case is one call:
//
//	core renew=1s grace=5s toleration=15s [capacity=N]   a new Core at 0s; prints its fence
//	take lease=N sent=D now=D [held=D]     a grant to an acquire sent at sent (Take)
//	started lease=N now=D                  its run started (Started, then Deadline)
//	reattach lease=N [gone]                a lease found on restart (Reattached, then Deadline)
//	adopt lease=N                          an orphan (Adopt)
//	   (take, reattach, adopt: [own=(R,G,T)] the job's own timing)
//	renew                                  how often the worker heartbeats (Renew)
//	progress lease=N                       the job's progress now is the input (Progress)
//	beat now=D                             a heartbeat due? (BeatDue), and its details (BeatDetails)
//	ack sent=D now=D [continue=(…)] [cancel=(…)] [kill=(…)] [gone=(…)]   its answer (Acked)
//	unacked                                no answer (Unacked)
//	fence now=D                            the fence check (Fence)
//	finish lease=N outcome=O               the run ends on its own
//	ended lease=N                          what to report (Ended)
//
// Times print as offsets from t0, so that the figures of a scenario read as
// the timing it states: with renew 1s and toleration 15s the fence is 13s.
func TestCoreScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/core", func(t *testing.T, path string) {
		var c *Core
		var wire api.Timing // what the daemon says of its timing
		runs := map[uint64]*fakeRun{}
		held := func(t *testing.T, d *datadriven.TestData) *Held {
			id := leaseArg(t, d)
			h := c.Held(id)
			if h == nil {
				t.Fatalf("%s: lease %d is not held", d.Pos, id)
			}
			return h
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var b strings.Builder
			switch d.Cmd {
			case "core":
				wire = api.Timing{
					RenewSeconds:      durArg(t, d, "renew").Seconds(),
					GraceSeconds:      durArg(t, d, "grace").Seconds(),
					TolerationSeconds: durArg(t, d, "toleration").Seconds(),
				}
				capacity := 1
				if d.HasArg("capacity") {
					d.ScanArgs(t, "capacity", &capacity)
				}
				c = NewCore(capacity, ConfigOf(wire), t0)
				clear(runs)
				fmt.Fprintf(&b, "fence %v\n", c.fence())
			case "take":
				g := grantArg(t, d, wire)
				if d.HasArg("held") {
					g.HeldSeconds = durArg(t, d, "held").Seconds()
				}
				h, start := c.Take(g, at(durArg(t, d, "sent")), at(durArg(t, d, "now")))
				fmt.Fprintf(&b, "lease %d: base %v", h.Lease(), h.base.Sub(t0))
				if start {
					b.WriteString("; start\n")
				} else {
					fmt.Fprintf(&b, "; not started: report %s\n", outcomeString(TooLate()))
				}
			case "started":
				h := held(t, d)
				r := newFakeRun()
				runs[h.Lease()] = r
				if c.Started(h, r, at(durArg(t, d, "now"))) {
					fmt.Fprintf(&b, "lease %d: stop at once\n", h.Lease())
				}
				writeDeadline(&b, c, h)
			case "reattach":
				g := grantArg(t, d, wire)
				var r Run
				if !d.HasArg("gone") {
					fr := newFakeRun()
					runs[g.Lease], r = fr, fr
				}
				h := c.Reattached(g, r)
				if r == nil {
					fmt.Fprintf(&b, "lease %d: report %s\n", g.Lease, outcomeString(Lost(nil)))
				}
				writeDeadline(&b, c, h)
			case "adopt":
				h := c.Adopt(grantArg(t, d, wire))
				writeDeadline(&b, c, h)
			case "beat":
				ids, due := c.BeatDue(at(durArg(t, d, "now")))
				if !due {
					return "no heartbeat due\n"
				}
				fmt.Fprintf(&b, "heartbeat names %v\n", ids)
				details := c.BeatDetails()
				for _, id := range slices.Sorted(maps.Keys(details)) {
					fmt.Fprintf(&b, "details lease %d: %s\n", id, details[id])
				}
			case "renew":
				fmt.Fprintf(&b, "renew %v\n", c.Renew())
			case "progress":
				c.Progress(held(t, d), []byte(strings.TrimSpace(d.Input)))
			case "ack":
				reply := api.HeartbeatReply{Timing: wire}
				for _, dir := range []api.Directive{api.DirectiveContinue, api.DirectiveCancel, api.DirectiveKill, api.DirectiveGone} {
					for _, id := range idsArg(t, d, string(dir)) {
						reply.Leases = append(reply.Leases, api.LeaseDirective{Lease: id, Directive: dir})
					}
				}
				a := c.Acked(at(durArg(t, d, "sent")), at(durArg(t, d, "now")), reply)
				for _, dl := range a.Fence {
					fmt.Fprintf(&b, "deadline lease %d: %v\n", dl.Lease, dl.At.Sub(t0))
				}
				writeStops(&b, a.Stop)
				for _, h := range a.Forget {
					fmt.Fprintf(&b, "forget lease %d\n", h.Lease())
				}
				for _, h := range a.Start {
					fmt.Fprintf(&b, "start lease %d\n", h.Lease())
				}
				for _, e := range a.Report {
					fmt.Fprintf(&b, "report lease %d: %s\n", e.Held.Lease(), outcomeString(e.Outcome))
				}
				if a.Unfenced {
					b.WriteString("unfenced\n")
				}
			case "unacked":
				c.Unacked()
			case "fence":
				stops, fell, silent, _ := c.Fence(at(durArg(t, d, "now")))
				writeStops(&b, stops)
				if fell {
					fmt.Fprintf(&b, "fenced: silent %v\n", silent)
				}
				fmt.Fprintf(&b, "room %d\n", c.Room())
			case "finish":
				var o string
				d.ScanArgs(t, "outcome", &o)
				runs[leaseArg(t, d)].finish(Outcome{Outcome: o, Reason: "by the run"})
			case "ended":
				h := held(t, d)
				o, report := c.Ended(h)
				if !report {
					return "no report\n"
				}
				fmt.Fprintf(&b, "report %s\n", outcomeString(o))
			default:
				t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			}
			if b.Len() == 0 {
				return "ok\n"
			}
			return b.String()
		})
	})
}

// grantArg is the grant of lease=N, of the daemon's timing wire, its job
// of its own timing if own=(R,G,T) is given.
func grantArg(t *testing.T, d *datadriven.TestData, wire api.Timing) api.Grant {
	g := api.Grant{Lease: leaseArg(t, d), Timing: wire}
	for _, a := range d.CmdArgs {
		if a.Key != "own" {
			continue
		}
		if len(a.Vals) != 3 {
			t.Fatalf("%s: own=(renew,grace,toleration), is %v", d.Pos, a.Vals)
		}
		var v [3]float64
		for i, s := range a.Vals {
			dur, err := time.ParseDuration(s)
			if err != nil {
				t.Fatalf("%s: own: %v", d.Pos, err)
			}
			v[i] = dur.Seconds()
		}
		g.Job.Timing = &api.Timing{RenewSeconds: v[0], GraceSeconds: v[1], TolerationSeconds: v[2]}
	}
	return g
}

func writeDeadline(b *strings.Builder, c *Core, h *Held) {
	if dl, ok := c.Deadline(h); ok {
		fmt.Fprintf(b, "deadline lease %d: %v\n", h.Lease(), dl.At.Sub(t0))
	} else {
		fmt.Fprintf(b, "no deadline for lease %d\n", h.Lease())
	}
}

func writeStops(b *strings.Builder, stops []Stop) {
	for _, s := range stops {
		how := "cancel"
		if s.Kill {
			how = "kill"
		}
		fmt.Fprintf(b, "stop lease %d: %s (%s)\n", s.Lease, how, s.Why)
	}
}

func outcomeString(o Outcome) string {
	if o.Reason == "" {
		return o.Outcome
	}
	return fmt.Sprintf("%s (%s)", o.Outcome, o.Reason)
}

func leaseArg(t *testing.T, d *datadriven.TestData) uint64 {
	var id uint64
	d.ScanArgs(t, "lease", &id)
	return id
}

func durArg(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	var s string
	d.ScanArgs(t, key, &s)
	v, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: %s: %v", d.Pos, key, err)
	}
	return v
}

func idsArg(t *testing.T, d *datadriven.TestData, key string) []uint64 {
	arg, ok := d.Arg(key)
	if !ok {
		return nil
	}
	var ids []uint64
	for _, v := range arg.Vals {
		id, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: %s: %v", d.Pos, key, err)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
