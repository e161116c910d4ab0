package lease

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/projection"
)

// Scheduling. A submission may require labels of its worker, give a
// priority and a time before which its job is not granted; an acquire says
// which kinds its worker takes and which labels it offers. The job's side is
// recorded (lease.queued) and folded (projection's queue). The worker's
// offer is not recorded: an acquire that finds nothing records nothing, and
// one that grants a job needed no more than the job's own labels to be
// right. The service keeps each worker's last offer in memory, to tell the
// queued jobs that no worker present can take (Unroutable, JobView): what a
// restart forgets, a worker's next acquire tells again.

// MaxDelay bounds a not_before: a year ahead of the daemon's clock at most.
const MaxDelay = 365 * 24 * time.Hour

// What a queued job waits for (JobView.WaitingFor).
const (
	WaitingForTime   = "not_before" // its not_before, still ahead
	WaitingForWorker = "worker"     // a worker that takes its kind and offers its labels: none present
)

// checkSchedule checks an item's scheduling, at now on the daemon's clock.
func checkSchedule(it SubmitItem, now int64) error {
	if err := it.Labels.Check(); err != nil {
		return fmt.Errorf("%w: labels: %w", ErrInvalid, err)
	}
	if it.Priority < math.MinInt32 || it.Priority > math.MaxInt32 {
		return fmt.Errorf("%w: priority %d: want %d to %d", ErrInvalid, it.Priority, math.MinInt32, math.MaxInt32)
	}
	// Compared as times: a time past 2262 has no UnixNano.
	if nb := it.NotBefore; !nb.IsZero() && nb.After(time.Unix(0, now).Add(MaxDelay)) {
		return fmt.Errorf("%w: not_before %s is more than %s ahead of the daemon's clock (%s)", ErrInvalid,
			nb.UTC().Format(time.RFC3339), MaxDelay, time.Unix(0, now).UTC().Format(time.RFC3339))
	}
	return nil
}

// scheduleEvent sets the scheduling of it on e, its lease.queued, at now on
// the daemon's clock. A not_before already past says nothing and is not
// recorded (so no time before 1678, which has no UnixNano, either).
func scheduleEvent(e *event.Event, it SubmitItem, now int64) {
	e.Labels, e.Priority = it.Labels, int32(it.Priority)
	if nb := it.NotBefore; !nb.IsZero() && nb.After(time.Unix(0, now)) {
		e.NotBefore = nb.UnixNano()
	}
}

// sameSchedule reports whether a submission again of job j requires what it
// did: the same labels and priority. Its not_before is not compared: a
// client that retries "in ten minutes" names another time, and the job
// keeps its first.
func sameSchedule(j projection.Job, it SubmitItem) bool {
	return j.Labels == it.Labels && j.Priority == it.Priority
}

// offer is the projection's Offer of o, checked.
func (o AcquireOptions) offer() (projection.Offer, error) {
	for i, k := range o.Kinds {
		if k != event.KindRun && k != event.KindEvaluation {
			return projection.Offer{}, fmt.Errorf("%w: kinds: %q is not run or evaluation", ErrInvalid, k)
		}
		if slices.Contains(o.Kinds[:i], k) {
			return projection.Offer{}, fmt.Errorf("%w: kinds: %s given twice", ErrInvalid, k)
		}
	}
	if err := o.Labels.Check(); err != nil {
		return projection.Offer{}, fmt.Errorf("%w: labels: %w", ErrInvalid, err)
	}
	return projection.Offer{Kinds: o.Kinds, Labels: o.Labels}, nil
}

// offerSeen is what the service remembers of a worker's offer.
type offerSeen struct {
	offer   projection.Offer
	at      int64 // when it last acquired (Clock, ns)
	waiting int   // its long polls open now
}

// offeredLocked records worker's offer, made at now.
func (s *Service) offeredLocked(worker string, o projection.Offer, now int64) {
	if s.mu.offers == nil {
		s.mu.offers = make(map[string]*offerSeen)
	}
	seen := s.mu.offers[worker]
	if seen == nil {
		seen = &offerSeen{}
		s.mu.offers[worker] = seen
	}
	seen.offer, seen.at = o, now
}

// polling counts a long poll of worker opening (+1) or closing (-1): a
// worker waiting for a job is present however long it waits.
func (s *Service) polling(worker string, d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seen := s.mu.offers[worker]; seen != nil {
		seen.waiting += d
	}
}

// presentLocked returns the offers of the workers present at now: waiting
// for a job, or that acquired within toleration, or holding a live lease
// and reachable (it will acquire again when its job ends).
func (s *Service) presentLocked(now int64) []projection.Offer {
	var out []projection.Offer
	for id, seen := range s.mu.offers {
		if s.presentOfferLocked(id, seen, now) {
			out = append(out, seen.offer)
		}
	}
	return out
}

func (s *Service) presentOfferLocked(id string, seen *offerSeen, now int64) bool {
	if seen.waiting > 0 || now-seen.at <= int64(s.cfg.Toleration) {
		return true
	}
	w, ok := s.mu.table.Worker(id)
	return ok && !w.Unreachable && w.Live > 0
}

// forgetOffersLocked drops the offers of workers no longer present.
func (s *Service) forgetOffersLocked(now int64) {
	for id, seen := range s.mu.offers {
		if !s.presentOfferLocked(id, seen, now) {
			delete(s.mu.offers, id)
		}
	}
}

func takenBy(offers []projection.Offer, k event.Kind, l event.Labels) bool {
	for _, o := range offers {
		if o.Takes(k, l) {
			return true
		}
	}
	return false
}

// unroutableLocked is how many queued jobs no worker present can take.
func (s *Service) unroutableLocked(now int64) int {
	offers := s.presentLocked(now)
	n := 0
	for _, c := range s.mu.table.Classes() {
		if !takenBy(offers, c.Kind, c.Labels) {
			n += c.Queued
		}
	}
	return n
}

// scheduleView tells, of queued jobs, whether a worker present can take them
// and what they wait for. It reads the clock once, when first asked of a
// queued job.
type scheduleView struct {
	s      *Service
	now    int64
	offers []projection.Offer
	read   bool
}

// view is job j, which the table holds, as the service shows it.
func (v *scheduleView) view(j projection.Job) JobView {
	jv := JobView{Job: j}
	if j.Lease != 0 {
		if l, ok := v.s.mu.table.Lease(j.Lease); ok {
			jv.Live = &l
		}
	}
	v.set(&jv)
	return jv
}

func (v *scheduleView) set(jv *JobView) {
	if jv.State != fsm.Queued {
		return
	}
	if !v.read {
		v.now, v.read = v.s.now(), true
		v.offers = v.s.presentLocked(v.now)
	}
	jv.Takeable = takenBy(v.offers, jv.Kind, jv.Labels)
	switch {
	case jv.NotBefore > v.now:
		jv.WaitingFor = WaitingForTime
	case !jv.Takeable:
		jv.WaitingFor = WaitingForWorker
	}
}
