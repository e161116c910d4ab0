package lease

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/timing"
)

// The commands that save a worker or an executor round trips: each does in
// one command, one batch of the log and one fsync what the separate calls do
// in several, under the same rules. An acquire that starts its jobs is
// AcquireWith (worker.go); here are a report that carries the next acquire
// and the submission of many jobs at once.

// ReportNext is Report followed, in the same command and the same batch, by
// the acquire next asks for on behalf of the report's worker: the worker
// hands back a job and takes the next in one call. The report is decided
// exactly as Report decides it, and so is its answer and its error. The
// acquire is made only by the call that accepts the report — that ends the
// live lease — and then its grants are returned, none (an empty, non-nil
// slice) when no job is queued, the daemon is stopping or the caller went
// (ctx done, as Acquire); it never waits for a job. A refused report (stale — a late claim that differs from an
// accepted report included —, another worker's, unknown) acquires nothing,
// and so does a retry of a report after it was accepted: it gets the first
// answer, and grants is nil. A worker that sends the same report again
// because it got no answer (its first answer was lost) and gets nil so
// learns that the first may have granted leases it never heard of: its
// lease list (WorkerLeases) has them.
func (s *Service) ReportNext(ctx context.Context, worker string, id uint64, r Report, next AcquireOptions) (Answer, []Grant, error) {
	if err := CheckID("worker", worker); err != nil {
		return Answer{}, nil, err
	}
	if err := r.check(); err != nil {
		return Answer{}, nil, err
	}
	offer, err := next.checkOffer()
	if err != nil {
		return Answer{}, nil, fmt.Errorf("next: %w", err)
	}
	type reported struct {
		d      reportDecision
		grants []Grant
	}
	rep, err := command(ctx, s, "report", func(t *tx) (reported, error) {
		d, err := s.reportLocked(worker, id, r)
		if err != nil {
			return reported{}, err
		}
		// The report first, then the acquire, if this call accepts the
		// report. The queue is read before the report's events are folded:
		// a job the report puts back (an evaluation reported lost) goes to
		// the next worker that asks.
		evs := d.evs
		if d.accepted && !s.mu.stopping && ctx.Err() == nil { // a caller gone is granted nothing (Acquire)
			evs = s.grantEventsLocked(t, evs, worker, next, offer)
		}
		evs, err = t.stage(evs...) // a repeated report records nothing: a read
		if err != nil {
			return reported{}, err
		}
		d.staged(evs)
		rep := reported{d: d}
		if d.accepted {
			rep.grants = s.grantsLocked(evs)
			if rep.grants == nil {
				rep.grants = []Grant{}
			}
		}
		return rep, nil
	})
	a, err := rep.d.result(err)
	if err != nil {
		return a, nil, err
	}
	return a, rep.grants, nil
}

// MaxSubmitBatch bounds the jobs one SubmitBatch may submit. The body limit
// of the HTTP API bounds the batch as a whole too.
const MaxSubmitBatch = 1000

// SubmitItem is one job of a SubmitBatch.
type SubmitItem struct {
	ID   string
	Kind event.Kind
	Spec []byte
	// MaxRequeues caps how many times an evaluation is queued again after
	// its worker is lost: lost once more, it fails ("lost N times"). nil
	// is the daemon's default (Options.MaxRequeues), 0 no cap; a run has
	// none. The cap decided is recorded in the job's lease.queued.
	MaxRequeues *int
	// Labels are those a worker must offer (each, with an equal value) to
	// take the job; Priority orders it among the jobs a worker can take
	// (higher first; 0 the default); NotBefore, if set, is the time before
	// which it is granted to no one (at most MaxDelay ahead). A submission
	// again of the same job must name the same labels and priority; its
	// not_before is its first's. See schedule.go.
	Labels    event.Labels
	Priority  int
	NotBefore time.Time
	// Timing is the timing the job asks for of its own: a zero field is
	// not asked, and all zero (most jobs) is the daemon's timing, whatever
	// it is when the sweeper judges. A job that asks any is recorded with
	// the whole (timing.Own: the fields it names over the daemon's timing
	// then), which must hold together and lie within Options.Bounds.
	Timing timing.Config
}

// Submitted is one job's answer in a SubmitBatch: the job (with its live
// lease, if it has one) and whether this batch created it; or the error that
// refused the item, which then recorded nothing.
type Submitted struct {
	JobView
	Created bool
	Err     error
}

// SubmitBatch submits items in one command and one batch of the log: each
// item is decided as Submit decides it, in order, and answered in its place.
// An item Submit would refuse (a malformed id, kind, spec or cap, an id
// taken by another kind or spec or a cap named otherwise — by an item before
// it in the batch too —, or a new job while the daemon stops) is refused on
// its own, in its Submitted.Err, and records nothing; the other items are
// kept. The same job twice in a batch is created once and answered created
// only the first time. An item that names no cap is the job that exists,
// whatever its cap; one that names one must name the job's. The call itself
// is refused (ErrInvalid, recording nothing) for a batch of no item or of
// more than MaxSubmitBatch.
func (s *Service) SubmitBatch(ctx context.Context, items []SubmitItem) ([]Submitted, error) {
	if len(items) == 0 || len(items) > MaxSubmitBatch {
		return nil, fmt.Errorf("%w: a batch holds 1 to %d jobs, this one %d", ErrInvalid, MaxSubmitBatch, len(items))
	}
	out := make([]Submitted, len(items))
	specs := make([][]byte, len(items))
	caps := make([]int, len(items))
	owns := make([]timing.Config, len(items))
	for i, it := range items {
		var err error
		switch {
		case CheckID("job", it.ID) != nil:
			err = CheckID("job", it.ID)
		case it.Kind != event.KindRun && it.Kind != event.KindEvaluation:
			err = fmt.Errorf("%w: kind must be run or evaluation", ErrInvalid)
		case it.MaxRequeues != nil:
			caps[i] = *it.MaxRequeues
			err = checkMaxRequeues(caps[i], it.Kind)
		case it.Kind == event.KindEvaluation:
			caps[i] = s.maxRequeues
		}
		switch {
		case err != nil:
		case i > 0 && specs[i-1] != nil && bytes.Equal(it.Spec, items[i-1].Spec):
			specs[i] = specs[i-1] // a batch's jobs often share a spec: made canonical once
		default:
			specs[i], err = canonicalSpec(it.Spec)
		}
		if err == nil && it.Timing != (timing.Config{}) {
			owns[i], err = s.ownTiming(it.Timing)
		}
		out[i].Err = err
	}
	_, err := command(ctx, s, "submit", func(t *tx) (struct{}, error) {
		batch := make(map[string]int, len(items)) // id -> the item that queues it
		evs := make([]event.Event, 0, len(items))
		for i, it := range items {
			if out[i].Err == nil {
				out[i].Err = checkSchedule(it, t.clock())
			}
			if out[i].Err != nil {
				continue
			}
			spec := specs[i]
			j, ok := s.mu.table.Job(it.ID)
			if first, queued := batch[it.ID]; queued {
				j, ok = projection.Job{ID: it.ID, Kind: items[first].Kind, Spec: specs[first], MaxRequeues: caps[first],
					Labels: items[first].Labels, Priority: items[first].Priority, Timing: owns[first]}, true
			} else if !ok {
				var err error
				if j, ok, err = s.jobLocked(it.ID); err != nil {
					return struct{}{}, err
				}
			}
			switch {
			case ok && (j.Kind != it.Kind || !bytes.Equal(j.Spec, spec)):
				out[i].Err = fmt.Errorf("%w: job %q exists as a %s with spec %s", ErrJobExists, it.ID, j.Kind, j.Spec)
			case ok && it.MaxRequeues != nil && *it.MaxRequeues != j.MaxRequeues:
				out[i].Err = fmt.Errorf("%w: job %q exists with max_requeues %d", ErrJobExists, it.ID, j.MaxRequeues)
			case ok && !sameSchedule(j, it):
				out[i].Err = fmt.Errorf("%w: job %q exists with labels {%s}, priority %d", ErrJobExists, it.ID, j.Labels, j.Priority)
			case ok && !sameTiming(it.Timing, j.Timing):
				out[i].Err = fmt.Errorf("%w: job %q exists with %s", ErrJobExists, it.ID, timingWords(j.Timing))
			case ok:
				// The same job: answered below, as the table has it.
			case s.mu.stopping:
				out[i].Err = ErrStopping
			default:
				batch[it.ID] = i
				out[i].Created = true
				e := event.Event{Type: event.TypeQueued, Job: it.ID, Kind: it.Kind, Spec: spec, MaxRequeues: uint32(caps[i]), Timing: owns[i]}
				scheduleEvent(&e, it, t.clock())
				evs = append(evs, e)
			}
		}
		if _, err := t.stage(evs...); err != nil { // nothing new: a read
			return struct{}{}, err
		}
		sv := scheduleView{s: s}
		for i, it := range items {
			if out[i].Err != nil {
				continue
			}
			if j, ok := s.mu.table.Job(it.ID); ok {
				out[i].JobView = sv.view(j)
				continue
			}
			j, _, err := s.jobLocked(it.ID) // ended: in the archive
			if err != nil {
				return struct{}{}, err
			}
			out[i].JobView = JobView{Job: j}
		}
		return struct{}{}, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// linkStarts gives each lease.running that follows the lease.acquired of
// its job among evs, about to be staged, the token that grant will get:
// the acquired event's own seq, which the log numbers from next on. An
// acquire that starts its jobs (AcquireOptions.Start) stages both in one
// batch, before the log has numbered the grant; checkStarts checks the
// guess once it has, before anything is written.
func linkStarts(evs []event.Event, next func() uint64) {
	var first uint64
	for i := 1; i < len(evs); i++ {
		if e := &evs[i]; e.Type == event.TypeRunning && e.Lease == 0 && evs[i-1].Type == event.TypeAcquired && evs[i-1].Job == e.Job {
			if first == 0 {
				first = next()
			}
			e.Lease = first + uint64(i-1)
		}
	}
}

// checkStarts refuses numbered events in which a lease.running that follows
// the lease.acquired of its job does not carry that grant's token.
func checkStarts(evs []event.Event) error {
	for i := 1; i < len(evs); i++ {
		if e := &evs[i]; e.Type == event.TypeRunning && evs[i-1].Type == event.TypeAcquired && evs[i-1].Job == e.Job && e.Lease != evs[i-1].Lease {
			return fmt.Errorf("lease: job %q granted lease %d but started lease %d in the same batch", e.Job, evs[i-1].Lease, e.Lease)
		}
	}
	return nil
}
