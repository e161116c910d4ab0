package workload

// The run: E enqueuers submit the jobs while W workers take them through
// their lifecycle (worker.go), until every job is done or a call fails.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaselog/leaselog/api"
)

// run runs the workload and returns its elapsed time: from the first submit
// to the last accepted report. An error of a call stops the run.
func (b *bench) run(ctx context.Context) (time.Duration, error) {
	b.accepted = make([]atomic.Int32, b.Jobs)
	h, err := b.Admin.Health(ctx)
	if err != nil {
		return 0, fmt.Errorf("the daemon's /healthz: %w", err)
	}
	b.seq0 = h.Seq
	// The workers' token is tried before anything is written: a heartbeat of
	// no lease renews nothing.
	names := b.Workers
	if b.WorkerID != "" {
		names = 1 // every worker is that one
	}
	for w := range names {
		if _, err := b.Worker.Heartbeat(ctx, b.workerName(w), nil); err != nil {
			return 0, fmt.Errorf("worker %s: heartbeat: %w", b.workerName(w), workerCallHint(err))
		}
	}
	// A worker takes the oldest queued job, whoever submitted it.
	if queued, err := b.Admin.Jobs(ctx, "queued", ""); err != nil {
		return 0, fmt.Errorf("list the queued jobs: %w", err)
	} else if len(queued) > 0 {
		return 0, fmt.Errorf("the daemon has %d queued jobs (%s first): its workers would take them; run the bench on a daemon with none queued", len(queued), queued[0].ID)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	fail := func(err error) { cancel(err) }
	// A call, once sent, is let finish (an acquire's long poll, too): when
	// the run stops, nothing the daemon does after the cleanup's look is
	// left behind. Between calls, every goroutine looks at b.stop.
	b.stop = ctx
	call := context.WithoutCancel(ctx)

	var spec []byte
	spec, _ = json.Marshal(api.Spec{Run: "bench"})
	result := json.RawMessage(`{"result":"ok"}`)

	var wg sync.WaitGroup
	var slots atomic.Int64 // jobs not yet taken by a worker
	slots.Store(int64(b.Jobs))
	var next atomic.Int64 // the next job number to submit
	t0 := time.Now()
	size := max(b.Protocol.Batch, 1)
	for range b.Enqueuers {
		wg.Go(func() {
			var s [4][]time.Duration
			defer b.record(&s)
			for {
				lo := int(next.Add(int64(size)) - int64(size))
				if lo >= b.Jobs || ctx.Err() != nil {
					return
				}
				hi := min(lo+size, b.Jobs)
				st := time.Now()
				b.calls.Add(1)
				if err := b.submit(call, lo, hi, spec); err != nil {
					fail(err)
					return
				}
				s[opSubmit] = append(s[opSubmit], time.Since(st))
				b.submitted.Add(int64(hi - lo))
			}
		})
	}
	var end atomic.Int64 // ns after t0 of the last accepted report
	for w := range b.Workers {
		worker := b.workerName(w)
		wg.Go(func() {
			var s [4][]time.Duration
			defer b.record(&s)
			err := b.workerLoop(call, worker, &slots, result, &s, func() {
				b.done.Add(1)
				for {
					e, now := end.Load(), int64(time.Since(t0))
					if now <= e || end.CompareAndSwap(e, now) {
						break
					}
				}
			})
			if err != nil {
				fail(err)
			}
		})
	}
	stop := make(chan struct{})
	var pw sync.WaitGroup
	if b.Progress != nil {
		pw.Go(func() {
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					b.Progress(b.done.Load(), b.submitted.Load())
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	pw.Wait()
	if err := context.Cause(ctx); err != nil {
		return 0, b.cleanup(err)
	}
	return time.Duration(end.Load()), nil
}

// submit submits jobs lo to hi-1: one call, a batch or a single submit.
func (b *bench) submit(ctx context.Context, lo, hi int, spec json.RawMessage) error {
	if b.Protocol.Batch == 0 {
		_, created, err := b.Admin.Submit(ctx, api.Submit{ID: b.jobID(lo), Kind: Kind, Spec: spec})
		if err == nil && !created {
			err = errors.New("it existed already")
		}
		if err != nil {
			return fmt.Errorf("submit %s: %w", b.jobID(lo), err)
		}
		return nil
	}
	items := make([]api.Submit, 0, hi-lo)
	for i := lo; i < hi; i++ {
		items = append(items, api.Submit{ID: b.jobID(i), Kind: Kind, Spec: spec})
	}
	subs, err := b.Admin.SubmitBatch(ctx, items)
	if err != nil {
		return fmt.Errorf("submit %s to %s in a batch: %w", b.jobID(lo), b.jobID(hi-1), err)
	}
	if len(subs) != len(items) {
		return fmt.Errorf("submit %s to %s in a batch: %d answers for %d jobs", b.jobID(lo), b.jobID(hi-1), len(subs), len(items))
	}
	for i, sub := range subs {
		if sub.ID != items[i].ID || sub.Status != http.StatusCreated {
			msg := ""
			if sub.Error != nil {
				msg = ": " + sub.Error.Error()
			}
			return fmt.Errorf("submit %s in a batch: answered %s with status %d%s, want 201 (a new job)", items[i].ID, sub.ID, sub.Status, msg)
		}
	}
	return nil
}

// cleanup cancels the jobs of a failed run that are still queued (or
// leased: its workers reported their leases failed, unless that failed too),
// so that the next run finds none queued, and adds to err what it did.
func (b *bench) cleanup(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ids []string
	for _, state := range []string{"queued", "acquired", "running"} {
		js, lerr := b.Admin.Jobs(ctx, state, Kind)
		if lerr != nil {
			return fmt.Errorf("%w (and listing the jobs left %s: %v)", err, state, lerr)
		}
		for _, j := range js {
			if b.jobIndex(j.ID) >= 0 {
				ids = append(ids, j.ID)
			}
		}
	}
	if len(ids) == 0 {
		return err
	}
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range min(32, len(ids)) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(ids)) && failed.Load() == nil; i = next.Add(1) - 1 {
				if _, cerr := b.Admin.Cancel(ctx, ids[i]); cerr != nil {
					cerr = fmt.Errorf("cancelling job %s: %w", ids[i], cerr)
					failed.CompareAndSwap(nil, &cerr)
				}
			}
		})
	}
	wg.Wait()
	if cerr := failed.Load(); cerr != nil {
		return fmt.Errorf("%w (and %v)", err, *cerr)
	}
	return fmt.Errorf("%w (cancelled the run's %d jobs left queued or leased)", err, len(ids))
}
