package scenario

import (
	"fmt"
	"strings"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
)

// The scheduling arguments: a submission's labels=(k=v, ...) priority=N
// not-before=D (D after the clock's now), an acquire's kinds=K[,K]
// labels=(k=v, ...); and the command that shows a job as a worker would
// find it (job id=J).

// labels reads labels=(k=v, ...); an error of the service's own checks is
// kept for the service to refuse, as a client's bad labels on the wire
// would be: none is read then.
func (a *args) labels() (event.Labels, error) {
	return event.ParseLabels(a.list("labels"))
}

// schedule sets a submission's scheduling on it.
func (a *args) schedule(r *Runner, it *lease.SubmitItem) {
	l, err := a.labels()
	if err != nil {
		a.fail("labels", a.str("labels", ""), err)
	}
	it.Labels, it.Priority = l, a.int("priority", 0)
	if _, ok := a.has("not-before"); ok {
		it.NotBefore = r.clock.Now().Add(a.dur("not-before", 0))
	}
}

// offer sets an acquire's kinds and labels on o.
func (a *args) offer(o *lease.AcquireOptions) {
	for _, k := range a.list("kinds") {
		kind, err := event.ParseKind(k)
		if err != nil {
			a.fail("kinds", k, err)
		}
		o.Kinds = append(o.Kinds, kind)
	}
	l, err := a.labels()
	if err != nil {
		a.fail("labels", a.str("labels", ""), err)
	}
	o.Labels = l
}

// showJob prints job id as the service shows it: its scheduling, and, queued,
// whether a worker present takes it and what it waits for.
func (r *Runner) showJob(b *strings.Builder, id string) {
	v, err := r.svc.JobView(ctx, id)
	if err != nil {
		fmt.Fprintf(b, "error: %v\n", err)
		return
	}
	fmt.Fprintf(b, "job %s %s %s place=%d", v.ID, v.Kind, v.State, v.Place)
	if v.Labels != "" {
		fmt.Fprintf(b, " labels=%s", v.Labels)
	}
	if v.Priority != 0 {
		fmt.Fprintf(b, " priority=%d", v.Priority)
	}
	if v.WaitingFor != "" {
		fmt.Fprintf(b, " waiting-for=%s", v.WaitingFor)
	}
	if v.WaitingFor != "" || v.Takeable {
		fmt.Fprintf(b, " takeable=%v", v.Takeable)
	}
	b.WriteString("\n")
}
