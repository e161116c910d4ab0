package linearize

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
)

// script is a Daemon that answers each call with the next of its answers,
// whatever was asked: a history made by hand.
type script struct {
	t       *testing.T
	answers []answer
}

type answer struct {
	reply any
	err   error
}

func (s *script) next() answer {
	if len(s.answers) == 0 {
		s.t.Fatal("the script has no answer left")
	}
	a := s.answers[0]
	s.answers = s.answers[1:]
	return a
}

func (s *script) job(id string) (api.Job, error) {
	a := s.next()
	j, _ := a.reply.(api.Job)
	if a.err == nil {
		j.ID = id
	}
	return j, a.err
}

func (s *script) Submit(_ context.Context, sub api.Submit) (api.Job, bool, error) {
	a := s.next()
	created, _ := a.reply.(bool)
	return api.Job{ID: sub.ID}, created, a.err
}
func (s *script) Job(_ context.Context, id string) (api.Job, error)    { return s.job(id) }
func (s *script) Cancel(_ context.Context, id string) (api.Job, error) { return s.job(id) }
func (s *script) Kill(_ context.Context, id string) (api.Job, error)   { return s.job(id) }
func (s *script) Acquire(context.Context, string, int, time.Duration) ([]api.Grant, error) {
	a := s.next()
	gs, _ := a.reply.([]api.Grant)
	return gs, a.err
}
func (s *script) Heartbeat(context.Context, string, []uint64) (api.HeartbeatReply, error) {
	a := s.next()
	h, _ := a.reply.(api.HeartbeatReply)
	return h, a.err
}
func (s *script) WorkerLeases(context.Context, string) ([]api.Grant, error) {
	a := s.next()
	gs, _ := a.reply.([]api.Grant)
	return gs, a.err
}
func (s *script) Start(context.Context, string, uint64) (api.Lease, error) {
	a := s.next()
	return api.Lease{}, a.err
}
func (s *script) Report(context.Context, uint64, api.Report) (api.ReportReply, error) {
	a := s.next()
	r, _ := a.reply.(api.ReportReply)
	return r, a.err
}

var ctx = context.Background()

// move is one call of a hand-made history and the answer the script gives.
type move struct {
	call func(d Daemon)
	a    answer
}

func submit(job, kind string, created bool, err error) move {
	return move{func(d Daemon) { _, _, _ = d.Submit(ctx, api.Submit{ID: job, Kind: kind}) }, answer{created, err}}
}

// submitCapped is submit naming a cap on requeues.
func submitCapped(job string, cap int, created bool, err error) move {
	return move{func(d Daemon) {
		_, _, _ = d.Submit(ctx, api.Submit{ID: job, Kind: "evaluation", MaxRequeues: &cap})
	}, answer{created, err}}
}

func acquire(worker string, gs ...api.Grant) move {
	return move{func(d Daemon) { _, _ = d.Acquire(ctx, worker, 1, 0) }, answer{gs, nil}}
}

func grant(job string, lease uint64) api.Grant { return api.Grant{Lease: lease, Job: api.Job{ID: job}} }

func start(worker string, lease uint64) move {
	return move{func(d Daemon) { _, _ = d.Start(ctx, worker, lease) }, answer{}}
}

func report(worker string, lease, seq uint64, err error) move {
	return reportSaying(api.Report{Worker: worker, Outcome: "succeeded"}, lease, seq, err)
}

// reportSaying is a report that says r, answered seq or refused with err.
func reportSaying(r api.Report, lease, seq uint64, err error) move {
	return move{func(d Daemon) { _, _ = d.Report(ctx, lease, r) },
		answer{api.ReportReply{Accepted: err == nil, Lease: lease, Seq: seq}, err}}
}

// reportNext is a report carrying the next acquire, answered with next (nil:
// the answer repeats an earlier one) or refused with err.
func reportNext(worker string, lease, seq uint64, next *api.Grants, err error) move {
	return move{func(d Daemon) {
		_, _ = d.Report(ctx, lease, api.Report{Worker: worker, Outcome: "succeeded", Next: &api.Next{Max: 1}})
	}, answer{api.ReportReply{Accepted: err == nil, Lease: lease, Seq: seq, Next: next}, err}}
}

func read(job string, j api.Job, err error) move {
	return move{func(d Daemon) { _, _ = d.Job(ctx, job) }, answer{j, err}}
}

// The stream's events, numbered from 1 in order.
func stream(evs ...event.Event) []event.Event {
	for i := range evs {
		evs[i].Seq = uint64(i + 1)
		if evs[i].Type == event.TypeAcquired {
			evs[i].Lease = evs[i].Seq
		}
	}
	return evs
}

func queued(job string) event.Event {
	return event.Event{Type: event.TypeQueued, Job: job, Kind: event.KindEvaluation}
}

func acquired(job, worker string) event.Event {
	return event.Event{Type: event.TypeAcquired, Job: job, Worker: worker}
}

func ev(typ event.Type, job string, lease uint64) event.Event {
	return event.Event{Type: typ, Job: job, Lease: lease}
}

var (
	stale = &api.Error{Status: http.StatusConflict, Code: api.CodeStaleLease, StaleReportSeq: 8}
	down  = &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable}
)

// TestCheck: histories made by hand, each with the stream that goes with
// it; the check passes the linearizable ones and refuses the others.
func TestCheck(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // where a refusal's visualization goes
	started := event.Event{Type: event.TypeDaemonStarted}
	// j: queued (2), granted to w1 (3), running (4), expired (5) and
	// queued again (6) (an evaluation), granted to w2 (7); then last.
	expiredThenRegranted := func(last event.Event) []event.Event {
		return stream(started, queued("j"), acquired("j", "w1"), ev(event.TypeRunning, "j", 3),
			ev(event.TypeExpired, "j", 3), queued("j"), acquired("j", "w2"), last)
	}
	// j: queued (2), granted to w1 (3), running (4), reported (5) saying
	// first; then last.
	reported := func(last ...event.Event) []event.Event {
		return stream(append([]event.Event{started, queued("j"), acquired("j", "w1"), ev(event.TypeRunning, "j", 3),
			ev(event.TypeReported, "j", 3)}, last...)...)
	}
	first := api.Report{Worker: "w1", Outcome: "succeeded", Ref: "refs/a", Result: []byte(`{"a": 1}`)}
	shortened := api.Report{Worker: "w1", Outcome: "succeeded", Reason: "report refused (400 bad_request: x); sent again without result and ref"}
	claim := api.Report{Worker: "w1", Outcome: "failed", Ref: "refs/a"}
	claimStale := &api.Error{Status: http.StatusConflict, Code: api.CodeStaleLease, StaleReportSeq: 6}
	reportedThen := func(last ...move) []move {
		return append([]move{submit("j", "evaluation", true, nil), acquire("w1", grant("j", 3)), start("w1", 3),
			reportSaying(first, 3, 5, nil)}, last...)
	}
	lost := api.Report{Worker: "w1", Outcome: "lost"}
	capped := func(last move) []move {
		return []move{submitCapped("j", 1, true, nil), acquire("w1", grant("j", 3)), reportSaying(lost, 3, 4, nil),
			acquire("w1", grant("j", 6)), reportSaying(lost, 6, 7, nil), last}
	}
	cappedStream := func(last event.Event) []event.Event {
		return stream(started, queued("j"), acquired("j", "w1"), ev(event.TypeLost, "j", 3), queued("j"),
			acquired("j", "w1"), ev(event.TypeLost, "j", 6), last)
	}
	for _, c := range []struct {
		name  string
		moves []move
		evs   []event.Event
		ok    bool
	}{
		{"a retry shortened after a refusal answered with the first", reportedThen(
			reportSaying(shortened, 3, 5, nil), reportSaying(api.Report{Worker: "w1", Outcome: "succeeded", Result: []byte(`{"a":1}`)}, 3, 5, nil),
		), reported(), true},
		{"a retry answered stale", reportedThen(
			reportSaying(shortened, 3, 0, claimStale),
		), reported(ev(event.TypeStaleReport, "j", 3)), false},
		{"a late claim on a reported lease refused stale, twice", reportedThen(
			reportSaying(claim, 3, 0, claimStale), reportSaying(claim, 3, 0, claimStale),
		), reported(ev(event.TypeStaleReport, "j", 3)), true},
		{"a late claim on a reported lease answered with the first", reportedThen(
			reportSaying(claim, 3, 5, nil),
		), reported(), false},
		{"a job's life", []move{
			submit("j", "evaluation", true, nil), acquire("w1", grant("j", 3)), start("w1", 3),
			report("w1", 3, 5, nil), read("j", api.Job{State: "reported", Attempts: 1}, nil),
		}, stream(started, queued("j"), acquired("j", "w1"), ev(event.TypeRunning, "j", 3),
			ev(event.TypeReported, "j", 3)), true},
		{"two acquires granted one job", []move{
			submit("j", "evaluation", true, nil), acquire("w1", grant("j", 3)), acquire("w2", grant("j", 4)),
		}, stream(started, queued("j"), acquired("j", "w1"), acquired("j", "w2")), false},
		{"a report on an expired lease refused stale", []move{
			submit("j", "evaluation", true, nil), acquire("w1", grant("j", 3)), start("w1", 3),
			acquire("w2", grant("j", 7)), report("w1", 3, 0, stale),
		}, expiredThenRegranted(ev(event.TypeStaleReport, "j", 3)), true},
		{"a report on an expired lease accepted", []move{
			submit("j", "evaluation", true, nil), acquire("w1", grant("j", 3)), start("w1", 3),
			acquire("w2", grant("j", 7)), report("w1", 3, 8, nil),
		}, expiredThenRegranted(ev(event.TypeReported, "j", 3)), false},
		{"an acquire that missed a queued job", []move{
			submit("j", "evaluation", true, nil), acquire("w1"),
		}, stream(started, queued("j")), false},
		{"an acquire before the job was submitted", []move{
			acquire("w1"), submit("j", "evaluation", true, nil),
		}, stream(started, queued("j")), true},
		{"a read that missed an acknowledged submission", []move{
			submit("j", "evaluation", true, nil), read("j", api.Job{}, &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound}),
		}, stream(started, queued("j")), false},
		{"a submission without an answer that happened", []move{
			submit("j", "evaluation", false, down), acquire("w1", grant("j", 3)),
		}, stream(started, queued("j"), acquired("j", "w1")), true},
		// j reported by a report carrying the next acquire whose answer was
		// lost; the worker sends it again, and k stays queued.
		{"a report sent again answered as a repeat", []move{
			submit("j", "evaluation", true, nil), submit("k", "evaluation", true, nil),
			acquire("w1", grant("j", 4)), start("w1", 4),
			reportNext("w1", 4, 0, nil, down), reportNext("w1", 4, 6, nil, nil),
		}, stream(started, queued("j"), queued("k"), acquired("j", "w1"), ev(event.TypeRunning, "j", 4),
			ev(event.TypeReported, "j", 4)), true},
		{"a report's next acquire that missed a queued job", []move{
			submit("j", "evaluation", true, nil), submit("k", "evaluation", true, nil),
			acquire("w1", grant("j", 4)), start("w1", 4),
			reportNext("w1", 4, 0, nil, down), reportNext("w1", 4, 6, &api.Grants{}, nil),
		}, stream(started, queued("j"), queued("k"), acquired("j", "w1"), ev(event.TypeRunning, "j", 4),
			ev(event.TypeReported, "j", 4)), false},
		// j, capped at one requeue: lost (5), queued again (6), lost again
		// (8): it fails (9).
		{"a capped evaluation lost twice fails", capped(read("j", api.Job{State: "failed"}, nil)), cappedStream(ev(event.TypeFailed, "j", 0)), true},
		{"a capped evaluation lost twice read as queued again", capped(read("j", api.Job{State: "queued"}, nil)), cappedStream(ev(event.TypeFailed, "j", 0)), false},
		{"a capped evaluation submitted again naming another cap answered the same job", []move{
			submitCapped("j", 1, true, nil), submitCapped("j", 2, false, nil),
		}, stream(started, queued("j")), false},
		{"a capped evaluation submitted again naming no cap", []move{
			submitCapped("j", 1, true, nil), submit("j", "evaluation", false, nil),
		}, stream(started, queued("j")), true},
		{"an acquire without an answer that granted", []move{
			submit("j", "evaluation", true, nil), {func(d Daemon) { _, _ = d.Acquire(ctx, "w1", 1, 0) }, answer{nil, down}},
			read("j", api.Job{State: "acquired", Lease: &api.Lease{Lease: 3}}, nil),
		}, stream(started, queued("j"), acquired("j", "w1")), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := played(t, c.moves).Check(c.evs, 10*time.Second)
			if c.ok && err != nil {
				t.Fatalf("a linearizable history refused: %v", err)
			}
			if !c.ok && err == nil {
				t.Fatalf("a history that is not linearizable passed (%d operations)", res.Ops)
			}
			if err != nil {
				t.Logf("refused: %v", err)
			}
		})
	}
}

// played records moves, each answered as it says, as the calls of one
// client.
func played(t *testing.T, moves []move) *Recorder {
	rec := NewRecorder()
	s := &script{t: t}
	d := rec.Client("c", s)
	for _, mv := range moves {
		s.answers = append(s.answers, mv.a)
		mv.call(d)
	}
	return rec
}

// TestOperationsNeedEveryCall: a job in the stream that no recorded call
// submitted, or a lease no recorded call can have been granted, is the
// recording's fault, said as such rather than as a history not
// linearizable.
func TestOperationsNeedEveryCall(t *testing.T) {
	started := event.Event{Type: event.TypeDaemonStarted}
	for _, c := range []struct {
		name  string
		moves []move
	}{
		{"an unrecorded submission", nil},
		{"an unrecorded acquire", []move{submit("j", "evaluation", true, nil)}},
	} {
		_, err := played(t, c.moves).Operations(stream(started, queued("j"), acquired("j", "w1")))
		if err == nil {
			t.Errorf("%s: the operations were made (%v)", c.name, err)
		}
	}
}
