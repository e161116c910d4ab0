package sim

import (
	"errors"
	"time"
)

// The network carries every call: a request to the daemon, a reply back.
// Each message is delayed (a little, or — late — up to maxDelay), and may be
// dropped or duplicated; different delays reorder them. A partition cuts one
// worker's link both ways for a while. A call whose request or reply is lost
// gets no answer: its caller waits for its own timeout, if it has one.

// errRefused is what a caller sees when the daemon is down: its connection
// is refused at once (a transport error, so a retryable one).
var errRefused = errors.New("sim: connection refused")

// errTimeout is what a caller sees when its call's own timeout fires.
var errTimeout = errors.New("sim: call timed out (context deadline exceeded)")

// endpoint is who makes calls: a worker or a client.
type endpoint interface {
	name() string
	// deliver schedules fn to run for the caller at global time t; a worker
	// runs it only in the incarnation that made the call.
	deliver(c *call, t time.Duration, fn func())
	// cut reports whether the caller's link is partitioned now.
	cut() bool
}

// call is one request and the one answer its caller takes (the first to
// arrive); later answers (duplicates) are ignored, as a client would.
type call struct {
	id     uint64
	from   endpoint
	inc    int // the caller's incarnation
	req    request
	sent   time.Duration
	done   func(reply any, err error)
	over   bool
	rec    *callRec
	client int // porcupine client id
}

type network struct {
	s       *Sim
	healed  bool
	calls   uint64
	pDrop   float64
	pDup    float64
	pLate   float64
	latency time.Duration
}

func newNetwork(s *Sim) *network {
	return &network{s: s, pDrop: s.p.pDrop, pDup: s.p.pDup, pLate: s.p.pLate, latency: s.p.maxLatency}
}

// heal stops losses, duplicates and late messages; what is in flight keeps
// its delay.
func (n *network) heal() {
	n.healed = true
	n.pDrop, n.pDup, n.pLate = 0, 0, 0
	n.latency = min(n.latency, 20*time.Millisecond)
}

func (n *network) delay() time.Duration {
	r := n.s.rng
	if n.pLate > 0 && r.Float64() < n.pLate {
		return time.Duration(r.Int64N(int64(maxDelay)))
	}
	return time.Duration(r.Int64N(int64(n.latency) + 1))
}

// copies is how many copies of a message arrive: 0 (lost), 1, or 2.
func (n *network) copies(from endpoint) int {
	r := n.s.rng
	if from.cut() || (n.pDrop > 0 && r.Float64() < n.pDrop) {
		n.s.stats.Dropped++
		return 0
	}
	if n.pDup > 0 && r.Float64() < n.pDup {
		n.s.stats.Dup++
		return 2
	}
	return 1
}

// send starts call c: its request goes to the daemon. timeout, if positive,
// is the caller's own deadline on the global clock.
func (n *network) send(c *call, timeout time.Duration) {
	n.calls++
	c.id, c.sent = n.calls, n.s.now
	c.rec = n.s.hist.begin(c)
	k := n.copies(c.from)
	n.s.tracef("%s → daemon #%d %s%s", c.from.name(), c.id, c.req, lossNote(k))
	for range k {
		n.s.at(n.s.now+n.delay(), func() { n.s.daemon.receive(c) })
	}
	if timeout > 0 {
		c.from.deliver(c, n.s.now+timeout, func() { n.answer(c, nil, nil, errTimeout) })
	}
}

// reply sends the daemon's answer to c (from processing p) back to its caller.
func (n *network) reply(c *call, p *proc, reply any, err error) {
	k := n.copies(c.from)
	if k == 0 {
		n.s.tracef("daemon → %s #%d reply lost", c.from.name(), c.id)
	}
	for range k {
		c.from.deliver(c, n.s.now+n.delay(), func() { n.answer(c, p, reply, err) })
	}
}

// answer completes c with the first answer to arrive.
func (n *network) answer(c *call, p *proc, reply any, err error) {
	if c.over {
		return
	}
	c.over = true
	if p != nil {
		n.s.hist.answered(c.rec, p, n.s.now)
	}
	if err != nil {
		n.s.tracef("%s ← #%d %s: %v", c.from.name(), c.id, c.req.kind(), err)
	} else {
		n.s.tracef("%s ← #%d %s: %s", c.from.name(), c.id, c.req.kind(), describeReply(reply))
	}
	c.done(reply, err)
}

func lossNote(copies int) string {
	switch copies {
	case 0:
		return " (lost)"
	case 2:
		return " (duplicated)"
	}
	return ""
}
