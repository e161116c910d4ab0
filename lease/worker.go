package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/projection"
)

// Grant is a lease given to a worker, with its job.
type Grant struct {
	Lease uint64 // the fencing token
	Job   projection.Job
}

// MaxAcquire bounds how many leases one acquire may take.
const MaxAcquire = 100

// Acquire gives worker up to max queued jobs, without waiting: of every kind
// and unlabelled (see AcquireWith), the highest priority first, then the
// oldest.
// A call from an unreachable worker first records that it is reachable again.
//
// A caller gone (ctx done: its connection closed, its stream reset, its
// session ended) is granted nothing, and nothing is recorded: the check is
// made under the lock that stages the grants, so that a job is either
// granted to a caller still there or stays queued for the next.
func (s *Service) Acquire(ctx context.Context, worker string, max int) ([]Grant, error) {
	return s.AcquireWith(ctx, worker, AcquireOptions{Max: max})
}

// AcquireWait is Acquire that waits, until ctx is done, for a job to be queued
// when none is. It returns no grants (and no error) when ctx ends first.
func (s *Service) AcquireWait(ctx context.Context, worker string, max int) ([]Grant, error) {
	return s.AcquireWaitWith(ctx, worker, AcquireOptions{Max: max})
}

// AcquireOptions are the options of an acquire.
type AcquireOptions struct {
	Max int // how many leases to take at most: 1 to MaxAcquire
	// Start records each grant's job as started in the same batch as its
	// grant (lease.acquired, then lease.running): the acquire and the start
	// of each lease in one command and one fsync, where Acquire then Start
	// take two. The grants come back running.
	Start bool
	// Kinds are the kinds of job the worker takes (none: every kind), and
	// Labels those it offers: it is granted only jobs of a kind it takes
	// whose every label it offers with an equal value (schedule.go).
	Kinds  []event.Kind
	Labels event.Labels
}

// AcquireWith is Acquire with its options.
func (s *Service) AcquireWith(ctx context.Context, worker string, o AcquireOptions) ([]Grant, error) {
	r, err := s.acquire(ctx, worker, o)
	return r.grants, err
}

// AcquireWaitWith is AcquireWait with its options.
//
// While it waits, the worker counts as present (Unroutable), and a job not
// yet due wakes it when its time comes: a timer waits for the earliest
// not_before on the service's clock, and a sweep that finds jobs come due
// wakes every acquire waiting.
func (s *Service) AcquireWaitWith(ctx context.Context, worker string, o AcquireOptions) ([]Grant, error) {
	for first := true; ; first = false {
		r, err := s.acquire(ctx, worker, o)
		if err != nil || len(r.grants) > 0 {
			return r.grants, err
		}
		if first {
			s.polling(worker, +1)
			defer s.polling(worker, -1)
		}
		var due <-chan time.Time
		var timer *time.Timer
		if r.due > 0 {
			timer = time.NewTimer(r.due)
			due = timer.C
		}
		select {
		case <-r.wake:
		case <-due:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil, nil
		}
	}
}

// acquired is what one try of an acquire got: grants, or, when there were
// none, a channel that is closed when a job is queued or comes due (or the
// daemon stops), and how long on the service's clock until the earliest
// queued job not yet due is (0: none).
type acquired struct {
	grants []Grant
	wake   <-chan struct{}
	due    time.Duration
}

func (o AcquireOptions) check() error {
	_, err := o.checkOffer()
	return err
}

// checkOffer checks o and returns its offer.
func (o AcquireOptions) checkOffer() (projection.Offer, error) {
	if o.Max < 1 || o.Max > MaxAcquire {
		return projection.Offer{}, fmt.Errorf("%w: max must be 1 to %d, is %d", ErrInvalid, MaxAcquire, o.Max)
	}
	return o.offer()
}

// acquire takes what it can now. Finding nothing, it waits for nothing:
// "no job yet" is no answer a crash could undo, and the long poll waits on
// wake instead.
func (s *Service) acquire(ctx context.Context, worker string, o AcquireOptions) (acquired, error) {
	if err := CheckID("worker", worker); err != nil {
		return acquired{}, err
	}
	offer, err := o.checkOffer()
	if err != nil {
		return acquired{}, err
	}
	return command(ctx, s, "acquire", func(t *tx) (acquired, error) {
		if s.mu.stopping {
			return acquired{}, ErrStopping
		}
		if ctx.Err() != nil { // the caller went: a grant would go to no one
			t.noReadWait = true
			return acquired{wake: s.mu.queued}, nil
		}
		evs := s.grantEventsLocked(t, s.reachableLocked(worker, nil), worker, o, offer)
		if len(evs) == 0 {
			t.noReadWait = true
			var due time.Duration
			if at, ok := s.mu.table.NextDue(); ok {
				due = time.Duration(at - t.clock())
			}
			return acquired{wake: s.mu.queued, due: due}, nil
		}
		evs, err := t.stage(evs...)
		if err != nil {
			return acquired{}, err
		}
		// Finding no job may still have recorded worker.reachable: the long
		// poll then waits for the next job like one that recorded nothing.
		return acquired{grants: s.grantsLocked(evs), wake: s.mu.queued}, nil
	})
}

// grantEventsLocked appends to evs the events of an acquire by worker, whose
// offer is offer: a lease.acquired for each of the first o.Max queued jobs
// it may take now (projection's Pick), each followed, if o.Start, by the
// lease.running of its job, whose token tx.stage fills in (see linkStarts).
// It remembers the offer, and first lets the jobs due now be taken, waking
// the acquires waiting if there are any.
func (s *Service) grantEventsLocked(t *tx, evs []event.Event, worker string, o AcquireOptions, offer projection.Offer) []event.Event {
	now := t.clock()
	s.offeredLocked(worker, offer, now)
	if s.mu.table.Promote(now) > 0 {
		s.wakeLocked()
	}
	queued := s.mu.table.Pick(offer, o.Max)
	per := 1
	if o.Start {
		per = 2
	}
	evs = slices.Grow(evs, per*len(queued))
	for _, j := range queued {
		// The lease is granted with its job's own timing, if it has one:
		// its expiry and its worker's fence follow it from the log alone.
		evs = append(evs, event.Event{Type: event.TypeAcquired, Job: j.ID, Worker: worker, Timing: j.Timing})
		if o.Start {
			evs = append(evs, event.Event{Type: event.TypeRunning, Job: j.ID, Worker: worker})
		}
	}
	return evs
}

// grantsLocked returns the grants among staged events, each with its job as
// the table holds it now.
func (s *Service) grantsLocked(evs []event.Event) []Grant {
	var grants []Grant
	for _, e := range evs {
		if e.Type == event.TypeAcquired {
			j, _ := s.mu.table.Job(e.Job)
			grants = append(grants, Grant{Lease: e.Lease, Job: j})
		}
	}
	return grants
}

// reachableLocked appends worker.reachable to evs if worker is marked
// unreachable: any call from a worker proves it is there.
func (s *Service) reachableLocked(worker string, evs []event.Event) []event.Event {
	if w, ok := s.mu.table.Worker(worker); ok && w.Unreachable {
		evs = append(evs, event.Event{Type: event.TypeWorkerReachable, Worker: worker})
	}
	return evs
}

// holdLocked finds lease id and checks that worker holds it. It returns
// ErrNotFound for an unknown lease and ErrWrongWorker for someone else's.
func (s *Service) holdLocked(worker string, id uint64) (projection.Lease, error) {
	l, ok, err := s.leaseLocked(id)
	if err != nil {
		return l, err
	}
	if !ok {
		return l, fmt.Errorf("%w: lease %d", ErrNotFound, id)
	}
	if l.Worker != worker {
		return l, fmt.Errorf("%w: lease %d is not worker %q's", ErrWrongWorker, id, worker)
	}
	return l, nil
}

// Start records that the job of lease id started. Starting a running lease
// again is answered the same, with nothing recorded.
func (s *Service) Start(ctx context.Context, worker string, id uint64) (projection.Lease, error) {
	if err := CheckID("worker", worker); err != nil {
		return projection.Lease{}, err
	}
	return command(ctx, s, "start", func(t *tx) (projection.Lease, error) {
		l, err := s.holdLocked(worker, id)
		if err == nil && !l.Live() {
			err = fmt.Errorf("%w: lease %d is %s", ErrStaleLease, id, l.State)
		}
		if err != nil {
			return projection.Lease{}, err
		}
		if l.State == fsm.Running {
			return l, nil // started before: a read
		}
		evs := s.reachableLocked(worker, nil)
		evs = append(evs, event.Event{Type: event.TypeRunning, Job: l.Job, Lease: id, Worker: worker})
		if _, err := t.stage(evs...); err != nil {
			return projection.Lease{}, err
		}
		l, _ = s.mu.table.Lease(id)
		return l, nil
	})
}

// Directive tells a worker what to do with a lease it heartbeats.
type Directive string

// The directives of a heartbeat reply.
const (
	Continue Directive = "continue" // keep running
	Cancel   Directive = "cancel"   // stop gracefully, then report
	Kill     Directive = "kill"     // stop now, then report
	Gone     Directive = "gone"     // the lease is not yours (any more): drop the job
)

// LeaseDirective is the reply for one lease of a heartbeat. The wire has its
// own (api.LeaseDirective); the server converts.
type LeaseDirective struct {
	Lease     uint64
	Directive Directive
}

// MaxHeartbeatLeases bounds the leases one heartbeat may name.
const MaxHeartbeatLeases = 10_000

// Heartbeat renews every lease in ids that worker holds live, and says for
// each what to do. A lease that is not a live lease of worker's (expired,
// reported, unknown, or someone else's) is answered gone and left untouched.
func (s *Service) Heartbeat(ctx context.Context, worker string, ids []uint64) ([]LeaseDirective, error) {
	return s.HeartbeatDetails(ctx, worker, ids, nil)
}

// HeartbeatDetails is Heartbeat that also gives details of some of the
// leases it names (their progress, as their jobs tell it): each a JSON
// object, kept in the lease's lease.heartbeat — unless it is what the lease
// holds already — and from there its job's latest details while it is live.
// Details of more than event.MaxDetailsLen bytes are kept as {"cut":N}, N
// their size: JSON cannot be cut like a reason, and a long word is no bad
// one. Details that are not a JSON object, or of a lease the heartbeat does
// not name, are refused (ErrInvalid), recording nothing.
func (s *Service) HeartbeatDetails(ctx context.Context, worker string, ids []uint64, details map[uint64][]byte) ([]LeaseDirective, error) {
	if err := CheckID("worker", worker); err != nil {
		return nil, err
	}
	if len(ids) > MaxHeartbeatLeases {
		return nil, fmt.Errorf("%w: %d leases in one heartbeat, at most %d", ErrInvalid, len(ids), MaxHeartbeatLeases)
	}
	details, err := checkDetails(ids, details)
	if err != nil {
		return nil, err
	}
	return command(ctx, s, "heartbeat", func(t *tx) ([]LeaseDirective, error) {
		out := make([]LeaseDirective, 0, len(ids))
		evs := s.reachableLocked(worker, make([]event.Event, 0, len(ids)+1))
		seen := make(map[uint64]bool, len(ids))
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			d := LeaseDirective{Lease: id, Directive: Gone}
			if l, ok := s.mu.table.Lease(id); ok && l.Worker == worker && l.Live() {
				d.Directive = directiveOf(l.Mode)
				e := event.Event{Type: event.TypeHeartbeat, Job: l.Job, Lease: id, Worker: worker}
				if b := details[id]; b != nil && !bytes.Equal(b, l.Details) {
					e.Details = b
				}
				evs = append(evs, e)
			}
			out = append(out, d)
		}
		if _, err := t.stage(evs...); err != nil { // nothing to renew: a read
			return nil, err
		}
		return out, nil
	})
}

func directiveOf(m event.RevokeMode) Directive {
	switch m {
	case event.RevokeCancel:
		return Cancel
	case event.RevokeKill:
		return Kill
	}
	return Continue
}

// Report is what a worker says a job came to.
type Report struct {
	Outcome event.Outcome   // OutcomeLost: the worker lost the job (see Service.Report)
	Ref     string          // the ref of the commits it brings back
	Reason  string          // optional, free text
	Result  json.RawMessage // optional JSON
}

// Answer is the reply to a report: the same answer for the same report, for
// as long as the log lives.
type Answer struct {
	Job   string
	Lease uint64
	Seq   uint64 // the lease.reported (or lease.lost) event; for a stale report, its lease.stale_report
	Stale bool
}

// Report limits. A report is never refused for its size: nothing a worker
// says is lost for being long. A ref or reason past its limit is kept cut (on
// a UTF-8 boundary) with a note of how much was cut; a result past its limit
// is dropped, and the reason says so. Invalid JSON in a result is refused
// (ErrInvalid): that is malformed input, not a long one.
const (
	MaxRefLen    = 1024
	MaxReasonLen = 4096
	MaxResultLen = 256 << 10
)

// Report records worker's report on lease id. On the live lease it is accepted:
// as lease.reported, an attempt; or, with OutcomeLost, as lease.lost, which
// ends the lease exactly as an expiry does — a run fails ("worker lost"), an
// evaluation is queued again (or cancelled, if revoked) — and is never an
// attempt.
//
// On a lease already reported (or lost), a retry of that first report gets
// its answer and records nothing. A retry is the holder's report (as every
// report must be) with the first report's outcome, and a ref and a result
// each absent or the first's, compared as normalised (see the limits above):
// the report sent again after a lost answer, and the one a worker shortens
// after a refusal (worker.Refused: no result, no ref, its reason rewritten —
// the reason, free text, is never compared). Any other report — another
// outcome, ref or result — is a late claim on a lease no longer held, and is
// treated as a report on an expired lease.
//
// On an expired lease (or such a late claim) the report is refused with
// ErrStaleLease, recorded once as lease.stale_report, and the returned
// Answer (Stale set) names that record; the same stale report again gets
// the same.
func (s *Service) Report(ctx context.Context, worker string, id uint64, r Report) (Answer, error) {
	if err := CheckID("worker", worker); err != nil {
		return Answer{}, err
	}
	if err := r.check(); err != nil {
		return Answer{}, err
	}
	d, err := command(ctx, s, "report", func(t *tx) (reportDecision, error) {
		d, err := s.reportLocked(worker, id, r)
		if err != nil {
			return d, err
		}
		evs, err := t.stage(d.evs...) // an answer given before records nothing: a read
		if err != nil {
			return reportDecision{}, err
		}
		d.staged(evs)
		return d, nil
	})
	return d.result(err)
}

// reportDecision is what a report decided under the service's mutex.
type reportDecision struct {
	a      Answer
	evs    []event.Event // to stage
	answer event.Type    // the type of the staged event whose seq answers
	state  fsm.State     // the lease's, for the error of a stale report
	// accepted: the lease was live, and this report ends it (the first
	// report of the lease, not a repeat).
	accepted bool
	// For a late claim on a lease already reported: the seq of its first
	// report, and what this one says otherwise.
	first   uint64
	differs string
}

// reportLocked decides worker's report r on lease id (see Report).
func (s *Service) reportLocked(worker string, id uint64, r Report) (reportDecision, error) {
	l, err := s.holdLocked(worker, id)
	if err != nil {
		return reportDecision{}, err
	}
	d := reportDecision{a: Answer{Job: l.Job, Lease: id, Seq: l.ReportSeq}, answer: event.TypeReported, state: l.State}
	switch {
	case l.Live():
		d.accepted = true
		d.evs = s.reachableLocked(worker, nil)
		if r.Outcome == event.OutcomeLost {
			d.answer = event.TypeLost
			d.evs = s.lostLocked(d.evs, l, event.Event{Type: event.TypeLost, Ref: r.Ref, Reason: r.Reason, Result: r.Result}, event.ReasonWorkerLost)
		} else {
			d.evs = append(d.evs, event.Event{Type: event.TypeReported, Job: l.Job, Lease: id, Worker: worker,
				Outcome: r.Outcome, Ref: r.Ref, Reason: r.Reason, Result: r.Result})
		}
		return d, nil
	case l.ReportSeq != 0: // reported (or lost) already
		first, err := s.firstReportLocked(l)
		if err != nil {
			return reportDecision{}, err
		}
		if d.differs = differs(first, r); d.differs == "" {
			return d, nil // a retry: the first answer, byte for byte
		}
		d.first = l.ReportSeq
	}
	return s.staleReportLocked(d, worker, l, r)
}

// staleReportLocked decides r as a stale report on l: the answer of its
// lease.stale_report, recorded now unless the same one was before.
func (s *Service) staleReportLocked(d reportDecision, worker string, l projection.Lease, r Report) (reportDecision, error) {
	d.a.Stale, d.a.Seq, d.answer = true, 0, event.TypeStaleReport
	e := event.Event{Type: event.TypeStaleReport, Job: l.Job, Lease: l.ID, Worker: worker,
		Outcome: r.Outcome, Ref: r.Ref, Reason: r.Reason, Result: r.Result}
	seq, ok, err := s.staleLocked(projection.StaleKeyOf(&e))
	if err != nil {
		return reportDecision{}, err
	}
	if ok {
		d.a.Seq = seq
	} else {
		d.evs = append(d.evs, e)
	}
	return d, nil
}

// firstReportLocked reads the first report of lease l, which was reported
// (or lost): the event at l.ReportSeq. The log keeps every event, and the
// lease, in the table or the archive, keeps that seq; so the first report is
// there to compare with for as long as the log lives, across restarts and
// snapshots, and no record needs to keep its content twice.
func (s *Service) firstReportLocked(l projection.Lease) (event.Event, error) {
	e, err := s.log.Get(l.ReportSeq)
	if err != nil {
		return event.Event{}, s.readFailedLocked(fmt.Errorf("lease: first report of lease %d: %w", l.ID, err))
	}
	if (e.Type != event.TypeReported && e.Type != event.TypeLost) || e.Lease != l.ID {
		return event.Event{}, fmt.Errorf("lease: lease %d names seq %d as its first report, which holds %s of lease %d: %w",
			l.ID, l.ReportSeq, e.Type, e.Lease, eventlog.ErrCorrupt)
	}
	return e, nil
}

// differs says what report r, normalised, says otherwise than first, the
// lease.reported or lease.lost of the lease's first report: "outcome", "ref"
// or "result"; "" when r is a retry of first. A ref or a result left out is
// no difference (a worker sends its report again without them after a
// refusal); the reason, free text, is not compared.
func differs(first event.Event, r Report) string {
	outcome := first.Outcome
	if first.Type == event.TypeLost {
		outcome = event.OutcomeLost
	}
	switch {
	case r.Outcome != outcome:
		return "outcome"
	case r.Ref != "" && r.Ref != first.Ref:
		return "ref"
	case len(r.Result) > 0 && !bytes.Equal(r.Result, first.Result):
		return "result"
	}
	return ""
}

// staged takes the seq of the answer from the events as staged.
func (d *reportDecision) staged(evs []event.Event) {
	for _, e := range evs {
		if e.Type == d.answer {
			d.a.Seq = e.Seq
		}
	}
}

// result is the report's answer and error, once its events are durable.
func (d reportDecision) result(err error) (Answer, error) {
	if err != nil {
		return Answer{}, err
	}
	if d.a.Stale && d.first != 0 {
		return d.a, fmt.Errorf("%w: lease %d of job %q was reported at seq %d, and this report's %s differs: a late claim; report kept as seq %d",
			ErrStaleLease, d.a.Lease, d.a.Job, d.first, d.differs, d.a.Seq)
	}
	if d.a.Stale {
		return d.a, fmt.Errorf("%w: lease %d of job %q is %s; report kept as seq %d", ErrStaleLease, d.a.Lease, d.a.Job, d.state, d.a.Seq)
	}
	return d.a, nil
}

// check refuses what is malformed and keeps what is only long (see the
// limits above), normalising r in place.
func (r *Report) check() error {
	if r.Outcome < event.OutcomeSucceeded || r.Outcome > event.OutcomeLost {
		return fmt.Errorf("%w: outcome must be succeeded, failed, cancelled, killed or lost", ErrInvalid)
	}
	if len(r.Result) > MaxResultLen {
		note := fmt.Sprintf("[result of %d bytes dropped: over the %d-byte limit]", len(r.Result), MaxResultLen)
		r.Result = nil
		if r.Reason != "" {
			note = " " + note
		}
		r.Reason = clip(r.Reason, MaxReasonLen-len(note)) + note
	}
	r.Ref = clip(r.Ref, MaxRefLen)
	r.Reason = clip(r.Reason, MaxReasonLen)
	if len(r.Result) > 0 {
		compact, err := compactJSON(r.Result)
		if err != nil {
			return fmt.Errorf("%w: result: %v", ErrInvalid, err)
		}
		r.Result = compact
	}
	return nil
}

// clip returns s if it fits in limit bytes, and otherwise as much of its start
// as fits beside a note of how much was cut ("…[cut 1234 bytes]"), cut on a
// UTF-8 boundary; the whole is at most limit bytes.
func clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	// The note is longest when the most is cut: size it for that, then cut.
	keep := max(0, limit-len(cutNote(len(s))))
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + cutNote(len(s)-keep)
}

func cutNote(n int) string { return fmt.Sprintf("…[cut %d bytes]", n) }
