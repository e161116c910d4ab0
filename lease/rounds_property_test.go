package lease_test

import (
	"errors"

	"pgregory.net/rapid"

	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/lease"
)

// roundActions adds the calls that save round trips to the property test:
// they obey the rules of the separate calls, and the harness's checks hold
// after them.
func (h *harness) roundActions(a map[string]func(*rapid.T)) {
	a["acquire-start"] = func(t *rapid.T) {
		w := workerIDs.Draw(t, "worker")
		gs, err := h.svc.AcquireWith(ctx, w, lease.AcquireOptions{Max: rapid.IntRange(1, 3).Draw(t, "max"), Start: true})
		if err != nil && !errors.Is(err, lease.ErrStopping) {
			t.Fatal(err)
		}
		for _, g := range gs {
			if g.Job.State != fsm.Running {
				t.Fatalf("job %s granted with start is %s", g.Job.ID, g.Job.State)
			}
		}
		h.granted(t, w, gs)
	}
	a["report-next"] = func(t *rapid.T) {
		w, id := h.call(t)
		r := someReport(t)
		_, before := h.accepted[id]
		_, jobs, leases, workers := h.table()
		ans, gs, err := h.svc.ReportNext(ctx, w, id, r, lease.AcquireOptions{Max: rapid.IntRange(1, 2).Draw(t, "max"), Start: rapid.Bool().Draw(t, "start")})
		switch {
		case err != nil && gs != nil:
			t.Fatalf("a refused report (%v) acquired %v", err, gs)
		case err == nil && before && gs != nil:
			t.Fatalf("a repeated report on lease %d acquired %v", id, gs)
		case err == nil && !before && gs == nil:
			t.Fatalf("the report that ended lease %d made no acquire", id)
		}
		h.granted(t, w, gs)
		h.judge(t, w, id, r, ans, err, jobs, leases, workers)
	}
	a["submit-batch"] = func(t *rapid.T) {
		items := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) lease.SubmitItem {
			spec := rapid.SampledFrom([]string{`{"run":"a"}`, `{"run":"b"}`}).Draw(t, "spec")
			return lease.SubmitItem{ID: jobIDs.Draw(t, "job"), Kind: kinds.Draw(t, "kind"), Spec: []byte(spec)}
		}), 1, 4).Draw(t, "items")
		res, err := h.svc.SubmitBatch(ctx, items)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Err != nil && !errors.Is(r.Err, lease.ErrJobExists) && !errors.Is(r.Err, lease.ErrStopping) {
				t.Fatalf("item %d: %v", i, r.Err)
			}
			if r.Err == nil && (r.ID != items[i].ID || r.Kind != items[i].Kind) {
				t.Fatalf("item %d (%s %s) answered %+v", i, items[i].ID, items[i].Kind, r.Job)
			}
		}
	}
}

// granted records the grants an acquire made for w, checking that tokens
// grow and that a grant that came running is running.
func (h *harness) granted(t *rapid.T, w string, gs []lease.Grant) {
	for _, g := range gs {
		prev := h.tokens[g.Job.ID]
		if len(prev) > 0 && g.Lease <= prev[len(prev)-1] {
			t.Fatalf("job %s: token %d granted after %d", g.Job.ID, g.Lease, prev[len(prev)-1])
		}
		if g.Job.State != fsm.Running && g.Job.State != fsm.Acquired {
			t.Fatalf("job %s granted in state %s", g.Job.ID, g.Job.State)
		}
		h.tokens[g.Job.ID] = append(prev, g.Lease)
		h.allLeases = append(h.allLeases, g.Lease)
		h.holder[g.Lease] = w
	}
}
