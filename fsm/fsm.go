// Package fsm owns the lease state machine: the states a job passes through on
// its way from submission to an end, and which event types move it.
//
// The machine is declared once, as looplab/fsm events (Declaration). Everything
// else is derived from that declaration at init: an immutable transition table
// that the fold and the service consult in a few nanoseconds without
// allocating (Next), and the Mermaid diagram of the docs (Diagram). No FSM
// object is kept per job: the table is the machine.
//
// The machine is per kind, because an expiry ends a run (failed, "worker
// lost") but sends an evaluation back to the queue (expired, then queued). A
// loss the worker reports itself (lease.lost) moves a job exactly as an
// expiry does. An evaluation lost once more than its max_requeues allows
// ends failed (lease.failed) instead of queued again.
package fsm

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	lfsm "github.com/looplab/fsm"

	"github.com/leaselog/leaselog/event"
)

// State is the state of a job.
type State uint8

// The states. None is the state of a job that does not exist yet; it is not
// stored, only used as the source of the submission.
const (
	None State = iota
	Queued
	Acquired
	Running
	Reported
	Expired
	Cancelled
	Failed

	numStates
)

// NumStates bounds the states: every State is in [0, NumStates). Tables
// indexed by State use it as their length.
const NumStates = int(numStates)

var stateNames = [numStates]string{"none", "queued", "acquired", "running", "reported", "expired", "cancelled", "failed"}

func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// ParseState is the inverse of State.String, for the states a job can be in.
func ParseState(s string) (State, error) {
	for st := Queued; st < numStates; st++ {
		if stateNames[st] == s {
			return st, nil
		}
	}
	return None, fmt.Errorf("fsm: unknown state %q (want one of %s)", s, strings.Join(stateNames[1:], ", "))
}

// States lists the states a job can be in, in declaration order.
func States() []State {
	ss := make([]State, 0, numStates-1)
	for s := Queued; s < numStates; s++ {
		ss = append(ss, s)
	}
	return ss
}

// Live reports whether a job in state s holds a lease.
func (s State) Live() bool { return s == Acquired || s == Running }

// Terminal reports whether no event can move a job out of s.
func (s State) Terminal() bool { return s == Reported || s == Cancelled || s == Failed }

// Kinds lists the job kinds the machine is declared for.
func Kinds() []event.Kind { return []event.Kind{event.KindRun, event.KindEvaluation} }

func ev(t event.Type, dst State, src ...State) lfsm.EventDesc {
	d := lfsm.EventDesc{Name: t.String(), Dst: dst.String()}
	for _, s := range src {
		d.Src = append(d.Src, s.String())
	}
	return d
}

// Declaration is the single definition of the machine for a kind, in the form
// looplab/fsm takes. A self-transition (heartbeat, revoke) is declared once per
// source state, since each keeps its own state.
func Declaration(k event.Kind) lfsm.Events {
	events := lfsm.Events{
		ev(event.TypeQueued, Queued, None),
		ev(event.TypeAcquired, Acquired, Queued),
		ev(event.TypeRunning, Running, Acquired),
		ev(event.TypeHeartbeat, Acquired, Acquired),
		ev(event.TypeHeartbeat, Running, Running),
		ev(event.TypeRevoked, Acquired, Acquired),
		ev(event.TypeRevoked, Running, Running),
		// A worker may report without having started: a checkout that failed.
		ev(event.TypeReported, Reported, Acquired, Running),
	}
	switch k {
	case event.KindRun:
		events = append(events,
			ev(event.TypeCancelled, Cancelled, Queued),
			// A run whose worker is lost fails: its agent's session cannot be resumed elsewhere.
			// Lost is the same loss said by the worker itself rather than found by the sweeper.
			ev(event.TypeExpired, Failed, Acquired, Running),
			ev(event.TypeLost, Failed, Acquired, Running),
		)
	case event.KindEvaluation:
		events = append(events,
			// An evaluation whose worker is lost goes back to the queue; if it had been
			// revoked, it is cancelled instead of queued.
			ev(event.TypeExpired, Expired, Acquired, Running),
			ev(event.TypeLost, Expired, Acquired, Running),
			ev(event.TypeQueued, Queued, Expired),
			ev(event.TypeCancelled, Cancelled, Queued, Expired),
			// One loss more than its cap allows requeues: a poison job ends.
			ev(event.TypeFailed, Failed, Expired),
		)
	default:
		return nil
	}
	return events
}

// table[kind][state][type] is the state after the event, plus one; 0 means the
// event is not allowed in that state.
var table [3][numStates][event.NumTypes]uint8

func init() {
	for _, k := range Kinds() {
		for s := None; s < numStates; s++ {
			for _, t := range event.Types() {
				dst, ok, err := viaLibrary(k, s, t)
				if err != nil {
					panic(err) // the declaration itself is broken: nothing can run
				}
				if ok {
					table[k][s][t] = uint8(dst) + 1
				}
			}
		}
	}
}

// viaLibrary asks looplab/fsm what the declaration says event t does to a job
// of kind k in state s. It builds a fresh FSM per question and so is slow; it is
// for init and tests only.
func viaLibrary(k event.Kind, s State, t event.Type) (State, bool, error) {
	m := lfsm.NewFSM(s.String(), Declaration(k), nil)
	if !m.Can(t.String()) {
		return None, false, nil
	}
	err := m.Event(context.Background(), t.String())
	var noTransition lfsm.NoTransitionError
	if err != nil && !errors.As(err, &noTransition) {
		return None, false, fmt.Errorf("fsm: %s %s on %s: %w", k, t, s, err)
	}
	dst, err := ParseState(m.Current())
	return dst, err == nil, err
}

// Next returns the state a job of kind k in state s is in after event t, and
// whether t is allowed there at all. Events that are not job transitions
// (stale reports, worker and daemon events) are never allowed.
func Next(k event.Kind, s State, t event.Type) (State, bool) {
	if int(k) >= len(table) || s >= numStates || int(t) >= event.NumTypes {
		return None, false
	}
	v := table[k][s][t]
	if v == 0 {
		return None, false
	}
	return State(v - 1), true
}

// Diagram renders the machine for kind k as a Mermaid state diagram, as drawn
// by looplab/fsm, with the None pseudo-state shown as Mermaid's start [*].
func Diagram(k event.Kind) (string, error) {
	m := lfsm.NewFSM(None.String(), Declaration(k), nil)
	out, err := lfsm.VisualizeForMermaidWithGraphType(m, lfsm.StateDiagram)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var b strings.Builder
	b.WriteString(lines[0] + "\n    direction LR\n")
	body := lines[2:] // drop looplab's "[*] --> none": none is drawn as [*] itself
	for i, l := range body {
		body[i] = strings.Replace(l, "    none -->", "    [*] -->", 1)
	}
	sort.SliceStable(body, func(i, j int) bool { // the start first, then by source state
		si, sj := strings.Contains(body[i], "[*]"), strings.Contains(body[j], "[*]")
		if si != sj {
			return si
		}
		return body[i] < body[j]
	})
	for _, l := range body {
		b.WriteString(l + "\n")
	}
	return b.String(), nil
}
