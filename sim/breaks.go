package sim

import (
	"fmt"
	"slices"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/worker"
)

// Breaks are deliberate faults in the simulated system, not in the
// weather: with one set, a suite of seeds must fail, or its checks could
// not fail at all. They live in the driver and the simulated supervisor,
// between a decision and its effect, so the product code stays untouched.
var breaks = map[string]string{
	"late-fence":        "the fence's stops, the worker's and the supervisor's, take effect 3×renew late: past the daemon's expiry",
	"no-fence":          "the fence's stops, the worker's and the supervisor's, are ignored",
	"deaf-supervisor":   "the supervisor ignores its deadline: only a live, running worker fences",
	"lost-as-attempt":   "the worker reports a lost job as failed, an attempt",
	"wall-deadlines":    "the daemon's deadlines run on its wall clock, which steps",
	"sleep-unseen":      "the daemon does not see its host's sleeps shorter than grace",
	"alive-unseen":      "a restart does not see the daemon's alive mark: it counts its absence from its last event",
	"return-unseen":     "the local worker's supervisors do not see the daemon take its store back: their deadlines move on with the time",
	"held-too-long":     "the local worker's supervisors move their deadlines by the daemon's downtime and 2×renew more",
	"offer-dropped":     "the daemon's acquires drop the worker's offer: every worker takes every kind, offers no label",
	"labels-dropped":    "the daemon's acquires drop the labels the worker offers: it takes its kinds, unlabelled jobs only",
	"own-timing-unseen": "the worker's grants lose their job's own timing: the worker and the supervisors fence each lease by the daemon's timing",
}

// ownTimingBreaks break what a job's own timing does: a run with one draws
// the jobs' own timing (Options.OwnTiming), or there is nothing to break.
var ownTimingBreaks = map[string]bool{"own-timing-unseen": true}

// breaker carries out a worker's stop or a supervisor's kill, or breaks it.
type breaker struct {
	s    *Sim
	name string
}

func newBreaker(s *Sim, name string) (*breaker, error) {
	if _, ok := breaks[name]; name != "" && !ok {
		return nil, fmt.Errorf("sim: unknown break %q", name)
	}
	return &breaker{s: s, name: name}, nil
}

func (b *breaker) stop(w *simWorker, st worker.Stop) {
	switch {
	case b.name == "late-fence" && st.Why == worker.CauseFence:
		b.s.after(3*renew, func() { st.Run.Stop(st.Kill) })
	case b.name == "no-fence" && st.Why == worker.CauseFence:
	default:
		st.Run.Stop(st.Kill)
	}
}

// supervise is the supervisor's kill of r, its deadline passed (atWake: on
// the host's wake).
func (b *breaker) supervise(r *simRun, atWake bool) {
	switch b.name {
	case "late-fence":
		b.s.after(3*renew, func() { r.kill(false) })
	case "no-fence", "deaf-supervisor":
	default:
		r.kill(atWake)
	}
}

// outcome is what the worker reports, or breaks it.
func (b *breaker) outcome(o worker.Outcome) worker.Outcome {
	if b.name == "lost-as-attempt" && o.Outcome == "lost" {
		o.Outcome = "failed"
	}
	return o
}

// reply is the answer a worker's call gets, or breaks it: the grants it
// carries (an acquire's, a lease list's, a report's next acquire's) with
// their job's own timing dropped. The answer the history recorded stays
// as the daemon gave it.
func (b *breaker) reply(reply any) any {
	if b.name != "own-timing-unseen" {
		return reply
	}
	switch r := reply.(type) {
	case []api.Grant:
		return withoutOwnTiming(r)
	case api.ReportReply:
		if r.Next != nil {
			next := *r.Next
			next.Leases = withoutOwnTiming(next.Leases)
			r.Next = &next
		}
		return r
	}
	return reply
}

func withoutOwnTiming(gs []api.Grant) []api.Grant {
	gs = slices.Clone(gs)
	for i := range gs {
		gs[i].Job.Timing = nil
	}
	return gs
}
