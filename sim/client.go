package sim

import (
	"fmt"
	"net/http"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/worker"
)

// client is an executor using the daemon: it submits jobs (again until
// answered: submission is idempotent), submits some twice and one with
// another spec, cancels and kills some, and reads jobs. Its calls cross the
// same network as the workers'. It also sends, in a worker's name, a second
// report on a lease that worker saw reported (again).
type client struct {
	s       *Sim
	idx     int
	id      string
	pid     int // porcupine client id
	jobs    []string
	kinds   map[string]string
	sched   map[string]schedule
	healed  bool
	pending int // submissions sent again until answered, not answered yet
	again   int // second reports sent
}

// sentReport is a report a worker sent on a lease.
type sentReport struct {
	lease uint64
	r     api.Report
}

const clientTimeout = 2 * time.Second

func newClient(s *Sim, i int) *client {
	c := &client{s: s, idx: i, id: fmt.Sprintf("c%d", i), kinds: map[string]string{}, sched: map[string]schedule{}}
	c.pid = s.hist.newClient(c.id)
	return c
}

func (c *client) name() string { return c.id }

func (c *client) deliver(_ *call, t time.Duration, fn func()) { c.s.at(t, fn) }

func (c *client) cut() bool { return false }

// begin starts the client's submissions (its share of the seed's jobs, one
// every few seconds, through the faulty phase) and its other calls.
func (c *client) begin() {
	s := c.s
	var ids []string
	for j := c.idx; j < s.p.jobs; j += s.p.clients {
		ids = append(ids, fmt.Sprintf("j%d", j))
	}
	c.submitNext(ids)
	c.next()
}

func (c *client) submitNext(ids []string) {
	s := c.s
	if len(ids) == 0 {
		return
	}
	s.after(time.Duration(s.rng.ExpFloat64()*float64(s.p.submitEvery)), func() {
		if c.healed {
			return
		}
		id := ids[0]
		kind := "evaluation"
		if s.rng.IntN(10) < 3 {
			kind = "run"
		}
		c.kinds[id] = kind
		sc := s.route.job(kind)
		sc.timing = s.own.job()
		c.sched[id] = sc
		c.jobs = append(c.jobs, id)
		c.pending++
		s.check.submitting(id)
		c.submit(id, kind, fmt.Sprintf(`{"run":"job %s"}`, id), true)
		c.submitNext(ids[1:])
	})
}

func (c *client) next() {
	s := c.s
	s.after(time.Duration(s.rng.Int64N(int64(4*time.Second))), func() {
		if c.healed {
			return
		}
		c.act()
		c.next()
	})
}

// act makes one call about one of the jobs submitted so far.
func (c *client) act() {
	s := c.s
	if len(c.jobs) == 0 {
		return
	}
	id := c.jobs[s.rng.IntN(len(c.jobs))]
	switch n := s.rng.IntN(20); {
	case n < 10:
		c.send(reqJob{id})
	case n < 13:
		c.submit(id, c.kinds[id], fmt.Sprintf(`{"run":"job %s"}`, id), false)
	case n < 14:
		c.submit(id, c.kinds[id], `{"run":"something else"}`, false)
	case n < 16:
		c.send(reqRevoke{job: id})
	case n < 17:
		c.send(reqRevoke{job: id, kill: true})
	default:
		c.reportAgain(id)
	}
}

// refusedContent is the refusal a worker shortens its report after (see
// worker.Refused).
var refusedContent = &api.Error{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: "result: invalid JSON"}

// reportAgain sends a second report on the lease of job id that its worker
// saw reported, in that worker's name, as a worker (or a second process of
// it) might, with the next acquire it carried if it did: the same report
// again or the one worker.Refused makes of it after a refusal for its
// content — without result and ref (both retries: the first answer,
// acquiring nothing), or, for a report with neither, as lost (a late claim
// unless it was lost) —, or one that says another outcome or another ref (a
// late claim: stale, kept, acquiring nothing). They come in turn, drawing
// nothing; the client's draws that did nothing before send them.
func (c *client) reportAgain(id string) {
	first, ok := c.s.accepted[id]
	if !ok {
		return
	}
	r := first.r
	turn := c.again % 4
	c.again++
	switch turn {
	case 1:
		o, do := worker.Refused(worker.Outcome{Outcome: r.Outcome, Ref: r.Ref, Reason: r.Reason, Result: r.Result}, refusedContent)
		if do != worker.Resend {
			return // a lost report with nothing to leave out: nothing to send
		}
		r = api.Report{Worker: r.Worker, Outcome: o.Outcome, Ref: o.Ref, Reason: o.Reason, Result: o.Result, Next: r.Next}
	case 2:
		r.Outcome = "failed"
		if first.r.Outcome == "failed" {
			r.Outcome = "succeeded"
		}
	case 3:
		r.Ref += "-claimed"
	}
	c.s.stats.Again++
	c.send(reqReport{first.lease, r})
}

func (c *client) send(req request) {
	cl := &call{from: c, req: req, client: c.pid, done: func(any, error) {}}
	c.s.net.send(cl, clientTimeout)
}

// capOf is the cap on requeues the client names for job id of kind, by
// its number, drawing nothing: every fourth evaluation is capped at one
// requeue, every fourth at two — a job lost that often fails —, the others
// name none (the daemon's default, none).
func capOf(id, kind string) (int, bool) {
	var n int
	if _, err := fmt.Sscanf(id, "j%d", &n); err != nil || kind != "evaluation" {
		return 0, false
	}
	switch n % 4 {
	case 1:
		return 1, true
	case 3:
		return 2, true
	}
	return 0, false
}

// submit sends a submission; until answered, if again.
func (c *client) submit(id, kind, spec string, again bool) {
	r := reqSubmit{job: id, jobKind: kind, spec: spec, sched: c.sched[id]}
	r.maxRequeues, r.namesCap = capOf(id, kind)
	cl := &call{from: c, req: r, client: c.pid}
	cl.done = func(reply any, err error) {
		if !again {
			return
		}
		if err == nil || !api.Retryable(err) {
			c.pending--
			return
		}
		c.s.after(renew/2, func() { c.submit(id, kind, spec, again) })
	}
	c.s.net.send(cl, clientTimeout)
}

// heal: the client stops making new calls (retries go on).
func (c *client) heal() { c.healed = true }
