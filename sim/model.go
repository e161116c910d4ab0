package sim

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
// lease exactly as an expiry does (lostState), answered like a report and
// never an attempt. It does not know sequence
// numbers either: a report's answer, a stale report's record and a token
// granted by an acquire whose answer nobody saw are bound when first
// observed, and must be the same ever after; tokens must grow.

type opKind uint8

const (
	opSubmit  opKind = iota
	opAcquire        // an acquire granted the job
	opMiss           // an acquire that could have granted the job did not
	opStart
	opBeat
	opReport
	opHolds // the worker's lease list names the lease
	opCancel
	opKill
	opRead
	opExpire
)

var opNames = [...]string{"submit", "acquire", "miss", "start", "beat", "report", "holds", "cancel", "kill", "read", "expire"}

type input struct {
	op                   opKind
	start                bool // opAcquire: the grant came running
	job, worker          string
	lease                uint64
	jobKind, spec        string
	outcome, ref, reason string
}

type output struct {
	unknown   bool
	code      string // the API error code; "" for success
	created   bool
	lease     uint64
	state     string
	attempts  int
	directive string
	seq       uint64
}

// mlease is a lease as the model knows it.
type mlease struct {
	token    uint64 // 0 until observed (granted by an answer nobody saw)
	worker   string
	live     bool
	reported bool
	mode     event.RevokeMode
	answer   uint64 // the accepted report's seq, 0 until observed
	stale    []staleAnswer
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
	i, o := in.(input), out.(output)
	ok, next := stepJob(j, i, o)
	return ok, next
}

func stepJob(j mjob, in input, out output) (bool, mjob) {
	unknown := out.unknown
	switch in.op {
	case opSubmit:
		if !j.exists {
			if !unknown && (out.code != "" || !out.created) {
				return false, j
			}
			return true, mjob{exists: true, kind: in.jobKind, spec: in.spec, state: fsm.Queued}
		}
		if unknown {
			return true, j
		}
		if j.kind == in.jobKind && j.spec == in.spec {
			return out.code == "" && !out.created, j
		}
		return out.code == api.CodeJobExists, j

	case opAcquire:
		if !j.exists || j.state != fsm.Queued {
			return unknown, j
		}
		if !unknown && out.lease <= j.maxToken() {
			return false, j
		}
		j = j.clone()
		j.state = fsm.Acquired
		if in.start {
			j.state = fsm.Running
		}
		j.leases = append(j.leases, mlease{token: out.lease, worker: in.worker, live: true})
		return true, j

	case opMiss:
		return !j.exists || j.state != fsm.Queued, j

	case opStart:
		j, i := j.find(in.lease, in.worker)
		code := ""
		switch {
		case i < 0:
			code = api.CodeNotFound
		case j.leases[i].worker != in.worker:
			code = api.CodeForbidden
		case !j.leases[i].live:
			code = api.CodeStaleLease
		}
		if !unknown && out.code != code {
			return false, j
		}
		if code == "" && j.state == fsm.Acquired {
			j = j.clone()
			j.state = fsm.Running
		}
		return true, j

	case opBeat:
		j, i := j.find(in.lease, in.worker)
		want := string(api.DirectiveGone)
		if i >= 0 && j.leases[i].worker == in.worker {
			want = directiveOf(j.leases[i])
		}
		return out.directive == want, j

	case opHolds:
		j, i := j.find(in.lease, in.worker)
		return i >= 0 && j.leases[i].worker == in.worker && j.leases[i].live, j

	case opReport:
		j, i := j.find(in.lease, in.worker)
		switch {
		case i < 0:
			return unknown || out.code == api.CodeNotFound, j
		case j.leases[i].worker != in.worker:
			return unknown || out.code == api.CodeForbidden, j
		case j.leases[i].live:
			if !unknown && out.code != "" {
				return false, j
			}
			j = j.clone()
			l := &j.leases[i]
			l.live, l.reported, l.answer = false, true, out.seq
			if in.outcome == event.OutcomeLost.String() {
				// A loss ends the lease as an expiry does, and answers like
				// a report: never an attempt.
				j.state = lostState(j.kind, l.mode)
				return true, j
			}
			j.state = fsm.Reported
			j.attempts++
			return true, j
		case j.leases[i].reported:
			if unknown {
				return true, j
			}
			if out.code != "" {
				return false, j
			}
			if j.leases[i].answer == 0 {
				j = j.clone()
				j.leases[i].answer = out.seq
			}
			return j.leases[i].answer == out.seq, j
		default: // ended without a report: stale
			if unknown {
				return true, j
			}
			if out.code != api.CodeStaleLease {
				return false, j
			}
			key := in.outcome + "\x00" + in.ref + "\x00" + in.reason
			for _, s := range j.leases[i].stale {
				if s.key == key {
					return s.seq == out.seq, j
				}
			}
			j = j.clone()
			j.leases[i].stale = append(j.leases[i].stale, staleAnswer{key, out.seq})
			return true, j
		}

	case opCancel, opKill:
		if !j.exists {
			return unknown || out.code == api.CodeNotFound, j
		}
		mode := event.RevokeCancel
		if in.op == opKill {
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
		return unknown || (out.code == "" && out.state == j.state.String()), j

	case opRead:
		if !j.exists {
			return out.code == api.CodeNotFound, j
		}
		if out.code != "" || out.state != j.state.String() || out.attempts != j.attempts {
			return false, j
		}
		if !j.state.Live() {
			return out.lease == 0, j
		}
		j, i := j.find(out.lease, "")
		return i == len(j.leases)-1, j

	case opExpire:
		j, i := j.find(in.lease, "")
		if i < 0 || i != len(j.leases)-1 || !j.leases[i].live {
			return false, j
		}
		j = j.clone()
		l := &j.leases[i]
		l.live = false
		j.state = lostState(j.kind, l.mode)
		return out.state == j.state.String(), j
	}
	return false, j
}

// lostState is where a job goes when its worker is lost (an expiry, or a
// lost report): a run fails; an evaluation is queued again, or cancelled if
// it was revoked.
func lostState(kind string, mode event.RevokeMode) fsm.State {
	switch {
	case kind == "run":
		return fsm.Failed
	case mode != 0:
		return fsm.Cancelled
	}
	return fsm.Queued
}

func equal(a, b any) bool {
	x, y := a.(mjob), b.(mjob)
	if x.exists != y.exists || x.kind != y.kind || x.spec != y.spec || x.state != y.state || x.attempts != y.attempts || len(x.leases) != len(y.leases) {
		return false
	}
	for i := range x.leases {
		l, m := x.leases[i], y.leases[i]
		if l.token != m.token || l.worker != m.worker || l.live != m.live || l.reported != m.reported ||
			l.mode != m.mode || l.answer != m.answer || !slices.Equal(l.stale, m.stale) {
			return false
		}
	}
	return true
}

func (in input) String() string {
	var b strings.Builder
	b.WriteString(opNames[in.op])
	if in.worker != "" {
		b.WriteString(" " + in.worker)
	}
	b.WriteString(" " + in.job)
	if in.lease != 0 {
		fmt.Fprintf(&b, " lease=%d", in.lease)
	}
	if in.op == opReport {
		b.WriteString(" " + in.outcome)
	}
	return b.String()
}

func (o output) String() string {
	switch {
	case o.unknown:
		return "?"
	case o.code != "":
		return o.code + noteIf(" seq=", seqString(o.seq))
	}
	var parts []string
	if o.created {
		parts = append(parts, "created")
	}
	if o.state != "" {
		parts = append(parts, o.state)
	}
	if o.lease != 0 {
		parts = append(parts, fmt.Sprintf("lease=%d", o.lease))
	}
	if o.directive != "" {
		parts = append(parts, o.directive)
	}
	if o.seq != 0 {
		parts = append(parts, fmt.Sprintf("seq=%d", o.seq))
	}
	if len(parts) == 0 {
		return "ok"
	}
	return strings.Join(parts, " ")
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
				job := op.Input.(input).job
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
		DescribeOperation: func(in, out any) string { return in.(input).String() + " → " + out.(output).String() },
		DescribeState:     func(s any) string { return s.(mjob).String() },
	}
}

// Linearizability is what CheckLinearizable found.
type Linearizability struct {
	Ops     int
	Result  porcupine.CheckResult
	Elapsed time.Duration
	Visual  string // the path of porcupine's HTML visualization, on a failure
}

// CheckLinearizable checks the history against Model within timeout; a
// timeout counts as a failure. On a failure it writes porcupine's
// visualization to a temporary file.
func CheckLinearizable(h *History, timeout time.Duration) (Linearizability, error) {
	ops := h.Operations()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(Model(), ops, timeout)
	l := Linearizability{Ops: len(ops), Result: res, Elapsed: time.Since(start)}
	if res == porcupine.Ok {
		return l, nil
	}
	f, err := os.CreateTemp("", "leaselog-sim-*.html")
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
