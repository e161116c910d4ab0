// Package linearize owns the porcupine model of the lease service — the
// sequential specification a history of calls is checked against — and the
// operations it judges (Input, Output, one job each), for whoever records a
// history: the simulation (package sim) from its own simulated calls, and
// real tests from their calls to real daemons (Recorder, with the finished
// stream's events). Both read a call into operations the same way
// (CallOps, ops.go), each bounding an acquire's misses in time by what it
// knows. It knows the API's vocabulary (package api), the event log's
// (event) and the job's states (fsm), and nothing of the service or a
// store.
package linearize

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
)

// The sequential model of the lease service, one job at a time (the
// history is partitioned per job: every operation concerns one job, and
// jobs share nothing the model tracks). It knows no clock: expiry is an
// operation of its own (the sweeper's decision), and a lost report ends a
// lease exactly as an expiry does (lost), answered like a report and
// never an attempt; an evaluation lost once more than its cap on requeues
// allows fails. It knows routing (route.go): an acquire grants a job only
// if its worker takes the job's kind and offers its labels, and misses
// none it cannot take. A report on a lease already reported is a retry of the
// first (its answer) or a late claim (stale), by what it says (retryOf). It
// does not know sequence
// numbers either: a report's answer, a stale report's record and a token
// granted by an acquire whose answer nobody saw are bound when first
// observed, and must be the same ever after; tokens must grow.

// Op is what an operation does to its job.
type Op uint8

// The operations.
const (
	OpSubmit  Op = iota
	OpAcquire    // an acquire granted the job
	OpMiss       // an acquire that could have granted the job did not
	OpStart
	OpBeat
	OpReport
	OpHolds // the worker's lease list names the lease
	OpCancel
	OpKill
	OpRead
	OpExpire // the sweeper expired the lease
)

var opNames = [...]string{"submit", "acquire", "miss", "start", "beat", "report", "holds", "cancel", "kill", "read", "expire"}

// Input is an operation's call: what was asked of which job.
type Input struct {
	Op                   Op
	Start                bool // OpAcquire: the grant came running
	Job, Worker          string
	Lease                uint64
	JobKind, Spec        string
	MaxRequeues          int  // OpSubmit: the cap the submission names, if NamesCap
	NamesCap             bool // OpSubmit: it names one (else the daemon's default: none)
	Outcome, Ref, Reason string
	Result               string // OpReport: the result as compact JSON; "" for none
	// OpSubmit: the labels the job requires (Route's form) and its priority.
	Labels   string
	Priority int
	// OpAcquire, OpMiss: what the worker takes (Route).
	Offer Route
}

// Output is an operation's answer; Unknown when nobody saw it (the call may
// or may not have happened).
type Output struct {
	Unknown   bool
	Code      string // the API error code; "" for success
	Created   bool
	Lease     uint64
	State     string
	Attempts  int
	Directive string
	Seq       uint64
}

// mlease is a lease as the model knows it.
type mlease struct {
	token    uint64 // 0 until observed (granted by an answer nobody saw)
	worker   string
	live     bool
	reported bool
	mode     event.RevokeMode
	answer   uint64 // the accepted report's seq, 0 until observed
	first    said   // what the accepted report said
	stale    []staleAnswer
}

// said is what a report says that tells a retry from a late claim.
type said struct{ outcome, ref, result string }

// retryOf reports whether report in, on a lease reported first with first,
// is a retry of it: the same outcome, and a ref and a result each left out
// or the first's. The reason, free text, is not compared.
func retryOf(first said, in Input) bool {
	return in.Outcome == first.outcome && (in.Ref == "" || in.Ref == first.ref) &&
		(in.Result == "" || in.Result == first.result)
}

type staleAnswer struct {
	key string
	seq uint64
}

// mjob is the model's state: one job.
type mjob struct {
	exists   bool
	kind     string
	spec     string
	state    fsm.State
	attempts int
	leases   []mlease // in grant order; the last is the current one
	// maxRequeues caps requeues, the times the job was queued again after
	// a loss (0: no cap).
	maxRequeues, requeues int
	labels                string // Route's form
	priority              int
}

func (j mjob) clone() mjob {
	j.leases = slices.Clone(j.leases)
	for i := range j.leases {
		j.leases[i].stale = slices.Clone(j.leases[i].stale)
	}
	return j
}

func (j mjob) maxToken() uint64 {
	var m uint64
	for _, l := range j.leases {
		m = max(m, l.token)
	}
	return m
}

// find returns the index of lease token in j (on a copy of j, which may
// have bound the current lease to token), or -1.
func (j mjob) find(token uint64, worker string) (mjob, int) {
	for i, l := range j.leases {
		if l.token == token {
			return j, i
		}
	}
	n := len(j.leases)
	if n > 0 && j.leases[n-1].token == 0 && (worker == "" || j.leases[n-1].worker == worker) && token > j.maxToken() {
		j = j.clone()
		j.leases[n-1].token = token
		return j, n - 1
	}
	return j, -1
}

func directiveOf(l mlease) string {
	switch {
	case !l.live:
		return string(api.DirectiveGone)
	case l.mode == event.RevokeKill:
		return string(api.DirectiveKill)
	case l.mode == event.RevokeCancel:
		return string(api.DirectiveCancel)
	}
	return string(api.DirectiveContinue)
}

func step(state, in, out any) (bool, any) {
	j := state.(mjob)
	i, o := in.(Input), out.(Output)
	ok, next := stepJob(j, i, o)
	return ok, next
}

func stepJob(j mjob, in Input, out Output) (bool, mjob) {
	unknown := out.Unknown
	switch in.Op {
	case OpSubmit:
		if !j.exists {
			if !unknown && (out.Code != "" || !out.Created) {
				return false, j
			}
			return true, mjob{exists: true, kind: in.JobKind, spec: in.Spec, state: fsm.Queued, maxRequeues: in.MaxRequeues,
				labels: in.Labels, priority: in.Priority}
		}
		if unknown {
			return true, j
		}
		if j.kind == in.JobKind && j.spec == in.Spec && (!in.NamesCap || in.MaxRequeues == j.maxRequeues) &&
			j.labels == in.Labels && j.priority == in.Priority {
			return out.Code == "" && !out.Created, j
		}
		return out.Code == api.CodeJobExists, j

	case OpAcquire:
		if !j.exists || j.state != fsm.Queued {
			return unknown, j
		}
		if !in.Offer.takes(j.kind, j.labels) {
			return false, j // a job goes only to a worker that can take it
		}
		if !unknown && out.Lease <= j.maxToken() {
			return false, j
		}
		j = j.clone()
		j.state = fsm.Acquired
		if in.Start {
			j.state = fsm.Running
		}
		j.leases = append(j.leases, mlease{token: out.Lease, worker: in.Worker, live: true})
		return true, j

	case OpMiss:
		return !j.exists || j.state != fsm.Queued || !in.Offer.takes(j.kind, j.labels), j

	case OpStart:
		j, i := j.find(in.Lease, in.Worker)
		code := ""
		switch {
		case i < 0:
			code = api.CodeNotFound
		case j.leases[i].worker != in.Worker:
			code = api.CodeForbidden
		case !j.leases[i].live:
			code = api.CodeStaleLease
		}
		if !unknown && out.Code != code {
			return false, j
		}
		if code == "" && j.state == fsm.Acquired {
			j = j.clone()
			j.state = fsm.Running
		}
		return true, j

	case OpBeat:
		j, i := j.find(in.Lease, in.Worker)
		want := string(api.DirectiveGone)
		if i >= 0 && j.leases[i].worker == in.Worker {
			want = directiveOf(j.leases[i])
		}
		return out.Directive == want, j

	case OpHolds:
		j, i := j.find(in.Lease, in.Worker)
		return i >= 0 && j.leases[i].worker == in.Worker && j.leases[i].live, j

	case OpReport:
		j, i := j.find(in.Lease, in.Worker)
		switch {
		case i < 0:
			return unknown || out.Code == api.CodeNotFound, j
		case j.leases[i].worker != in.Worker:
			return unknown || out.Code == api.CodeForbidden, j
		case j.leases[i].live:
			if !unknown && out.Code != "" {
				return false, j
			}
			j = j.clone()
			l := &j.leases[i]
			l.live, l.reported, l.answer = false, true, out.Seq
			l.first = said{in.Outcome, in.Ref, in.Result}
			if in.Outcome == event.OutcomeLost.String() {
				// A loss ends the lease as an expiry does, and answers like
				// a report: never an attempt.
				j.lost(l.mode)
				return true, j
			}
			j.state = fsm.Reported
			j.attempts++
			return true, j
		case j.leases[i].reported && retryOf(j.leases[i].first, in):
			if unknown {
				return true, j
			}
			if out.Code != "" {
				return false, j
			}
			if j.leases[i].answer == 0 {
				j = j.clone()
				j.leases[i].answer = out.Seq
			}
			return j.leases[i].answer == out.Seq, j
		default: // ended without a report, or a late claim on one reported: stale
			if unknown {
				return true, j
			}
			if out.Code != api.CodeStaleLease {
				return false, j
			}
			key := in.Outcome + "\x00" + in.Ref + "\x00" + in.Reason + "\x00" + in.Result
			for _, s := range j.leases[i].stale {
				if s.key == key {
					return s.seq == out.Seq, j
				}
			}
			j = j.clone()
			j.leases[i].stale = append(j.leases[i].stale, staleAnswer{key, out.Seq})
			return true, j
		}

	case OpCancel, OpKill:
		if !j.exists {
			return unknown || out.Code == api.CodeNotFound, j
		}
		mode := event.RevokeCancel
		if in.Op == OpKill {
			mode = event.RevokeKill
		}
		switch {
		case j.state == fsm.Queued:
			j = j.clone()
			j.state = fsm.Cancelled
		case j.state.Live():
			n := len(j.leases) - 1
			if j.leases[n].mode < mode {
				j = j.clone()
				j.leases[n].mode = mode
			}
		}
		return unknown || (out.Code == "" && out.State == j.state.String()), j

	case OpRead:
		if !j.exists {
			return out.Code == api.CodeNotFound, j
		}
		if out.Code != "" || out.State != j.state.String() || out.Attempts != j.attempts {
			return false, j
		}
		if !j.state.Live() {
			return out.Lease == 0, j
		}
		j, i := j.find(out.Lease, "")
		return i == len(j.leases)-1, j

	case OpExpire:
		j, i := j.find(in.Lease, "")
		if i < 0 || i != len(j.leases)-1 || !j.leases[i].live {
			return false, j
		}
		j = j.clone()
		l := &j.leases[i]
		l.live = false
		j.lost(l.mode)
		return out.State == j.state.String(), j
	}
	return false, j
}

// lost moves j, a clone, where a job goes when its worker is lost (an
// expiry, or a lost report) from a lease revoked in mode: a run fails; an
// evaluation is cancelled if it was revoked, fails if it was queued again
// as often as its cap allows, and is queued again otherwise.
func (j *mjob) lost(mode event.RevokeMode) {
	switch {
	case j.kind == "run":
		j.state = fsm.Failed
	case mode != 0:
		j.state = fsm.Cancelled
	case j.maxRequeues != 0 && j.requeues >= j.maxRequeues:
		j.state = fsm.Failed
	default:
		j.state = fsm.Queued
		j.requeues++
	}
}

func equal(a, b any) bool {
	x, y := a.(mjob), b.(mjob)
	if x.exists != y.exists || x.kind != y.kind || x.spec != y.spec || x.state != y.state || x.attempts != y.attempts ||
		x.maxRequeues != y.maxRequeues || x.requeues != y.requeues || x.labels != y.labels || x.priority != y.priority ||
		len(x.leases) != len(y.leases) {
		return false
	}
	for i := range x.leases {
		l, m := x.leases[i], y.leases[i]
		if l.token != m.token || l.worker != m.worker || l.live != m.live || l.reported != m.reported ||
			l.mode != m.mode || l.answer != m.answer || l.first != m.first || !slices.Equal(l.stale, m.stale) {
			return false
		}
	}
	return true
}

func (in Input) String() string {
	var b strings.Builder
	b.WriteString(opNames[in.Op])
	if in.Worker != "" {
		b.WriteString(" " + in.Worker)
	}
	b.WriteString(" " + in.Job)
	if in.Lease != 0 {
		fmt.Fprintf(&b, " lease=%d", in.Lease)
	}
	if in.Op == OpReport {
		b.WriteString(" " + in.Outcome)
	}
	return b.String()
}

func (o Output) String() string {
	switch {
	case o.Unknown:
		return "?"
	case o.Code != "":
		return o.Code + noteIf(" seq=", seqString(o.Seq))
	}
	var parts []string
	if o.Created {
		parts = append(parts, "created")
	}
	if o.State != "" {
		parts = append(parts, o.State)
	}
	if o.Lease != 0 {
		parts = append(parts, fmt.Sprintf("lease=%d", o.Lease))
	}
	if o.Directive != "" {
		parts = append(parts, o.Directive)
	}
	if o.Seq != 0 {
		parts = append(parts, fmt.Sprintf("seq=%d", o.Seq))
	}
	if len(parts) == 0 {
		return "ok"
	}
	return strings.Join(parts, " ")
}

func noteIf(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

func seqString(seq uint64) string {
	if seq == 0 {
		return ""
	}
	return fmt.Sprint(seq)
}

func (j mjob) String() string {
	if !j.exists {
		return "(none)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s attempts=%d", j.kind, j.state, j.attempts)
	if j.maxRequeues != 0 {
		fmt.Fprintf(&b, " requeues=%d/%d", j.requeues, j.maxRequeues)
	}
	for _, l := range j.leases {
		fmt.Fprintf(&b, " [%d %s", l.token, l.worker)
		if l.live {
			b.WriteString(" live")
		}
		if l.mode != 0 {
			b.WriteString(" " + l.mode.String())
		}
		if l.reported {
			fmt.Fprintf(&b, " reported@%d", l.answer)
		}
		b.WriteString("]")
	}
	return b.String()
}

// Model is the porcupine model of the lease service, partitioned per job.
func Model() porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byJob := map[string][]porcupine.Operation{}
			for _, op := range history {
				job := op.Input.(Input).Job
				byJob[job] = append(byJob[job], op)
			}
			var out [][]porcupine.Operation
			for _, job := range slices.Sorted(maps.Keys(byJob)) {
				out = append(out, byJob[job])
			}
			return out
		},
		Init:              func() any { return mjob{} },
		Step:              step,
		Equal:             equal,
		DescribeOperation: func(in, out any) string { return in.(Input).String() + " → " + out.(Output).String() },
		DescribeState:     func(s any) string { return s.(mjob).String() },
	}
}

// Result is what Check found.
type Result struct {
	Ops     int
	Result  porcupine.CheckResult
	Elapsed time.Duration
	Visual  string // the path of porcupine's HTML visualization, on a failure
}

// Check checks ops against Model within timeout; a timeout counts as a
// failure. On a failure it writes porcupine's visualization to a temporary
// file.
func Check(ops []porcupine.Operation, timeout time.Duration) (Result, error) {
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(Model(), ops, timeout)
	l := Result{Ops: len(ops), Result: res, Elapsed: time.Since(start)}
	if res == porcupine.Ok {
		return l, nil
	}
	f, err := os.CreateTemp("", "leaselog-linearize-*.html")
	if err == nil {
		if verr := porcupine.Visualize(Model(), info, f); verr == nil {
			l.Visual = f.Name()
		}
		_ = f.Close()
	}
	what := "not linearizable"
	if res == porcupine.Unknown {
		what = fmt.Sprintf("porcupine timed out after %v (counted as a failure)", timeout)
	}
	return l, fmt.Errorf("history of %d operations %s; visualization: %s", len(ops), what, l.Visual)
}
