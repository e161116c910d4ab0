package ops

import (
	"strings"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
)

// The scheduling fields of the API (a submission's labels, priority and
// not_before; a worker's offer) as the service takes them, each refusal a
// 400 naming its field. Their bounds against the daemon's clock (a
// not_before at most a year ahead) are the service's (lease/schedule.go).

// ScheduleOf sets on it the scheduling of submission in.
func ScheduleOf(in api.Submit, it *lease.SubmitItem) error {
	l, err := event.MakeLabels(in.Labels)
	if err != nil {
		return badRequest("labels: %v", err)
	}
	it.Labels, it.Priority = l, in.Priority
	if in.NotBefore != "" {
		t, err := time.Parse(time.RFC3339Nano, in.NotBefore)
		if err != nil {
			return badRequest("not_before %q: want an RFC 3339 time, as 2026-12-04T08:00:00Z", in.NotBefore)
		}
		it.NotBefore = t
	}
	return nil
}

// offerOf sets on opts the offer o; a refusal's message starts with at,
// where the offer is in the request.
func offerOf(at string, o api.Offer, opts *lease.AcquireOptions) error {
	for _, s := range o.Kinds {
		k, err := event.ParseKind(s)
		if err != nil {
			return badRequest("%skinds: %q: want run or evaluation", at, s)
		}
		opts.Kinds = append(opts.Kinds, k)
	}
	l, err := event.MakeLabels(o.Labels)
	if err != nil {
		return badRequest("%slabels: %v", at, err)
	}
	opts.Labels = l
	return nil
}

// ViewOf converts a job as the service shows it: with its live lease, and,
// queued, what it waits for.
func ViewOf(v lease.JobView) api.Job {
	out := JobOf(v.Job, v.Live)
	out.WaitingFor = v.WaitingFor
	out.Unroutable = v.WaitingFor != "" && !v.Takeable // WaitingFor: queued, not about to be granted
	return out
}

// LabelFilter parses a query's labels, "key=value" pairs separated by
// commas ("" is none): the labels a job must require to be listed.
func LabelFilter(q string) (event.Labels, error) {
	if q == "" {
		return "", nil
	}
	l, err := event.ParseLabels(strings.Split(q, ","))
	if err != nil {
		return "", badRequest("labels %q: %v", q, err)
	}
	return l, nil
}
