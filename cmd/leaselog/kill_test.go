package main

// Real process kills with Jepsen-style accounting. The real daemon serves
// clients that speak the real protocol — executors submitting jobs and
// reading them back, workers acquiring, starting, heartbeating and reporting
// them, sometimes abandoning one and reporting it late — and is SIGKILLed at
// moments a seeded PRNG picks, then restarted on the same data directory.
//
// Every client records each operation before sending it (invoke), then what
// became of it: ok (answered 2xx, or 409 with the stale report's record),
// fail (answered 4xx, or the connection was refused: nothing was sent), or
// info (sent, answer lost: it may or may not have happened). After each
// restart — before any client may talk to the new daemon — and once more at
// the end, offline, the records are held against the log (kill_check_test.go):
// no acknowledged event lost, no event that no operation could have made, no
// token granted twice, no two live leases of a job, tokens growing per job,
// the log's prefix unchanged by a crash; and `leaselog replay --verify`
// passes on every crash image.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
)

var (
	killRunsFlag = flag.Int("kill.runs", 20, "how many times TestKillUnderLoad SIGKILLs the daemon")
	killSeedFlag = flag.Int64("kill.seed", 0, "seed of TestKillUnderLoad's kill moments and clients' choices (0: from the clock)")
)

// killConfig: the fast timings of the other tests, no local worker (the
// test's clients are the workers), info logs (debug would log every
// heartbeat), and frequent snapshots, so that kills land around them too.
const killConfig = `
[server]
listen = "127.0.0.1:0"
[store]
snapshot_every = 250
[plugins.executor]
renew_seconds = 0.1
grace_seconds = 0.5
toleration_seconds = 1.5
local_capacity = 0
[log]
level = "info"
`

// Load: executors, workers (and one auditor), and how many jobs may be submitted and not yet
// ended, as a client sees it (so the queue stays short and jobs get done).
const (
	killExecutors = 2
	killWorkers   = 3
	killBacklog   = 6
	killMinUp     = 40 * time.Millisecond // a daemon lives this long at least…
	killMaxUp     = 300 * time.Millisecond
)

// opResult is what became of an operation, in Jepsen's words.
type opResult int

const (
	pending opResult = iota // sent, not answered yet
	resOK                   // answered 2xx, or 409 stale_lease naming its record
	resFail                 // definitely not done: refused before sending, or answered 4xx
	resInfo                 // sent, the answer lost: it may or may not have happened
)

// op is one operation of one client: what it asked, and what it was told.
type op struct {
	client, kind string // kind: submit, read, acquire, leases, start, heartbeat, report, audit
	gen          int    // the daemon it was sent to
	job, jobKind string
	worker       string
	lease        uint64
	max          int // acquire
	report       api.Report
	res          opResult
	ans          opAnswer
}

// opAnswer is what a 2xx (or a stale report's 409) said.
type opAnswer struct {
	grants []api.Grant          // acquire, leases
	dirs   []api.LeaseDirective // heartbeat
	table  []api.Lease          // audit: the live leases
	events []api.Event          // audit: a page of the log
	seq    uint64               // report: the lease.reported, or the lease.stale_report if stale
	stale  bool
	job    api.Job // submit, read
}

// ledger is every client's operations, and what clients saw going wrong as
// they went. Safe for concurrent use.
type ledger struct {
	mu         sync.Mutex
	ops        []*op
	violations []string
}

func (h *ledger) invoke(o *op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, o)
}

func (h *ledger) finish(o *op, res opResult, ans opAnswer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o.res, o.ans = res, ans
}

func (h *ledger) violate(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.violations = append(h.violations, fmt.Sprintf(format, args...))
}

// snapshot copies the records, so that they can be checked while clients
// that still wait on an answer finish theirs.
func (h *ledger) snapshot() ([]op, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ops := make([]op, len(h.ops))
	for i, o := range h.ops {
		ops[i] = *o
	}
	return ops, append([]string(nil), h.violations...)
}

// daemons is the daemon the clients talk to: one generation per start.
type daemons struct {
	mu  sync.Mutex
	cur *generation
}

type generation struct {
	n    int
	c    *api.Client
	next chan struct{} // closed once the next generation serves, or the run ends
}

func (cl *daemons) current() *generation {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.cur
}

// publish lets the clients talk to c (nil: the run is over).
func (cl *daemons) publish(c *api.Client) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	g := &generation{c: c, next: make(chan struct{})}
	if old := cl.cur; old != nil {
		g.n = old.n + 1
		close(old.next)
	}
	cl.cur = g
}

// loadClient is one executor or worker.
type loadClient struct {
	name  string
	ctx   context.Context
	rng   *rand.Rand
	h     *ledger
	cl    *daemons
	slots chan struct{} // the backlog: an executor takes one per job, a worker gives it back
}

// call runs one operation against the current daemon: recorded before it is
// sent, then its result. A refused connection is a definite failure (nothing
// was sent); any other transport error leaves it indeterminate. After
// either, the client waits for the next daemon. An *api.Error is returned
// when the daemon refused the call.
func (c *loadClient) call(o *op, do func(context.Context, *api.Client) (opAnswer, error)) (opResult, opAnswer, *api.Error) {
	g := c.cl.current()
	if g.c == nil { // the run is over: nothing is sent
		return resFail, opAnswer{}, nil
	}
	o.client, o.gen = c.name, g.n
	c.h.invoke(o)
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	ans, err := do(ctx, g.c)
	cancel()
	var apiErr *api.Error
	var opErr *net.OpError
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	res := resOK
	switch {
	case err == nil:
	case errors.As(err, &apiErr) && apiErr.Code == api.CodeStaleLease && apiErr.StaleReportSeq != 0:
		ans, apiErr = opAnswer{seq: apiErr.StaleReportSeq, stale: true}, nil // a stale report, kept: acknowledged
	case errors.As(err, &apiErr) && apiErr.Status >= 500:
		// Nothing here fails a daemon but a kill, and a killed daemon says
		// nothing; whether the call did anything is unknown.
		c.h.violate("%s: %s to daemon %d: %v", c.name, o.kind, g.n, apiErr)
		res = resInfo
	case errors.As(err, &apiErr):
		res = resFail
	case errors.As(err, &syntaxErr), errors.As(err, &typeErr):
		c.h.violate("%s: %s to daemon %d: a 2xx the client cannot read: %v", c.name, o.kind, g.n, err)
		res = resInfo
	case errors.As(err, &opErr) && opErr.Op == "dial":
		res = resFail
	default:
		res = resInfo
	}
	c.h.finish(o, res, ans)
	if res != resOK && apiErr == nil {
		select { // the daemon is gone: wait for the next one
		case <-g.next:
		case <-c.ctx.Done():
		}
	}
	return res, ans, apiErr
}

// retry runs o (a fresh copy each time) until the daemon answers it: the
// operations that are idempotent, which a client sends again after losing
// the answer.
func (c *loadClient) retry(o op, do func(context.Context, *api.Client) (opAnswer, error)) (opResult, opAnswer, *api.Error) {
	for {
		o := o
		res, ans, apiErr := c.call(&o, do)
		if res == resOK || apiErr != nil || c.ctx.Err() != nil {
			return res, ans, apiErr
		}
	}
}

func (c *loadClient) release() {
	select {
	case c.slots <- struct{}{}:
	default: // a job leased twice (expired, queued again) gives back twice
	}
}

// executor submits jobs, each until the daemon answers, and after each reads
// back a job submitted earlier: an acknowledged job is never unknown, and
// its leases and attempts never go back, across any crash.
func (c *loadClient) executor() {
	spec := json.RawMessage(`{"run":"true"}`)
	var acked []string
	seen := map[string]api.Job{}
	for n := 1; ; n++ {
		select {
		case <-c.slots:
		case <-c.ctx.Done():
			return
		}
		id, kind := fmt.Sprintf("%s-%d", c.name, n), []string{"run", "evaluation"}[c.rng.Intn(2)]
		res, _, apiErr := c.retry(op{kind: "submit", job: id, jobKind: kind}, func(ctx context.Context, d *api.Client) (opAnswer, error) {
			j, _, err := d.Submit(ctx, api.Submit{ID: id, Kind: kind, Spec: spec})
			return opAnswer{job: j}, err
		})
		switch {
		case c.ctx.Err() != nil:
			return
		case apiErr != nil:
			c.h.violate("%s: submit %s refused: %v", c.name, id, apiErr)
			continue
		case res == resOK:
			acked = append(acked, id)
		}
		if len(acked) == 0 {
			continue
		}
		id = acked[c.rng.Intn(len(acked))]
		res, ans, apiErr := c.call(&op{kind: "read", job: id}, func(ctx context.Context, d *api.Client) (opAnswer, error) {
			j, err := d.Job(ctx, id)
			return opAnswer{job: j}, err
		})
		switch prev := seen[id]; {
		case apiErr != nil:
			c.h.violate("%s: acknowledged job %s read back: %v", c.name, id, apiErr)
		case res == resOK && (ans.job.Leases < prev.Leases || ans.job.Attempts < prev.Attempts):
			c.h.violate("%s: job %s went back: leases %d, attempts %d after %d, %d", c.name, id, ans.job.Leases, ans.job.Attempts, prev.Leases, prev.Attempts)
		case res == resOK:
			seen[id] = ans.job
		}
	}
}

// auditor reads what the daemon serves of the table and of the log, as
// fast as it answers: the live leases, and the newest page of events. A read
// waits until what it saw is durable, so nothing it was shown may be undone
// by a crash.
func (c *loadClient) auditor() {
	var after uint64
	for c.ctx.Err() == nil {
		res, ans, apiErr := c.call(&op{kind: "audit"}, func(ctx context.Context, d *api.Client) (opAnswer, error) {
			ls, err := d.Leases(ctx, "", "", "")
			if err != nil {
				return opAnswer{}, err
			}
			es, err := d.Events(ctx, api.EventQuery{After: after, Limit: 100})
			return opAnswer{table: ls, events: es.Events}, err
		})
		if apiErr != nil {
			c.h.violate("%s: audit refused: %v", c.name, apiErr)
		}
		if n := len(ans.events); res == resOK && n > 0 {
			after = ans.events[n-1].Seq - min(ans.events[n-1].Seq, 20) // the newest events, read again
		}
	}
}

// worker takes one lease at a time and works it as leaselog's worker does:
// start, heartbeats, report (sent again until answered). An acquire whose
// answer was lost is followed by GET .../leases, adopting what it finds.
// One lease in ten is abandoned after its start — no more heartbeats — and
// reported late: half a few jobs later, most likely accepted; half once the
// daemon no longer lists it, expired, so kept as a stale report.
func (c *loadClient) worker() {
	known := map[uint64]bool{}
	var late []lateLease
	for done := 0; c.ctx.Err() == nil; {
		if l := late; len(l) > 0 && done%4 == 0 && (!l[0].expired || c.gone(l[0].Lease)) {
			c.report(l[0].Grant, api.Report{Worker: c.name, Outcome: "killed", Reason: "abandoned",
				Ref: fmt.Sprintf("refs/leaselog/%s/%d-late", l[0].Job.ID, l[0].Lease)})
			late = l[1:]
		}
		res, ans, apiErr := c.call(&op{kind: "acquire", worker: c.name, max: 1}, func(ctx context.Context, d *api.Client) (opAnswer, error) {
			gs, err := d.Acquire(ctx, c.name, 1, 200*time.Millisecond)
			return opAnswer{grants: gs}, err
		})
		if apiErr != nil {
			c.h.violate("%s: acquire refused: %v", c.name, apiErr)
		}
		if res == resInfo {
			res, ans, _ = c.retry(op{kind: "leases", worker: c.name}, c.leases)
		}
		if res != resOK {
			continue
		}
		for _, g := range ans.grants {
			if known[g.Lease] {
				continue // adopted again: abandoned, or worked already
			}
			known[g.Lease] = true
			if c.work(g) {
				late = append(late, lateLease{g, c.rng.Intn(2) == 0})
			}
			done++
		}
	}
}

// lateLease is an abandoned lease, to be reported late: a few jobs later,
// or once it expired.
type lateLease struct {
	api.Grant
	expired bool
}

func (c *loadClient) leases(ctx context.Context, d *api.Client) (opAnswer, error) {
	gs, err := d.WorkerLeases(ctx, c.name)
	return opAnswer{grants: gs}, err
}

// gone reports whether the daemon no longer lists lease as the worker's.
func (c *loadClient) gone(lease uint64) bool {
	res, ans, _ := c.call(&op{kind: "leases", worker: c.name}, c.leases)
	return res == resOK && !slices.ContainsFunc(ans.grants, func(g api.Grant) bool { return g.Lease == lease })
}

// work runs one lease; it returns true if it abandoned it.
func (c *loadClient) work(g api.Grant) (abandoned bool) {
	defer c.release()
	lease := g.Lease
	_, _, apiErr := c.retry(op{kind: "start", worker: c.name, job: g.Job.ID, lease: lease}, func(ctx context.Context, d *api.Client) (opAnswer, error) {
		_, err := d.Start(ctx, c.name, lease)
		return opAnswer{}, err
	})
	if apiErr != nil && apiErr.Status != http.StatusConflict {
		c.h.violate("%s: start of %d refused: %v", c.name, lease, apiErr)
	}
	if apiErr != nil || c.ctx.Err() != nil {
		return false // expired meanwhile (409): not ours any more
	}
	if c.rng.Intn(10) == 0 {
		return true
	}
	for range 1 + c.rng.Intn(3) {
		res, ans, apiErr := c.call(&op{kind: "heartbeat", worker: c.name, job: g.Job.ID, lease: lease}, func(ctx context.Context, d *api.Client) (opAnswer, error) {
			r, err := d.Heartbeat(ctx, c.name, []uint64{lease})
			return opAnswer{dirs: r.Leases}, err
		})
		if apiErr != nil {
			c.h.violate("%s: heartbeat of %d refused: %v", c.name, lease, apiErr)
		}
		if res == resOK && len(ans.dirs) == 1 && ans.dirs[0].Directive == "gone" {
			return false // expired meanwhile: drop it, no report
		}
	}
	outcome := []string{"succeeded", "failed"}[c.rng.Intn(2)]
	c.report(g, api.Report{Worker: c.name, Outcome: outcome, Ref: fmt.Sprintf("refs/leaselog/%s/%d", g.Job.ID, lease),
		Result: json.RawMessage(fmt.Sprintf(`{"by":%q}`, c.name))})
	return false
}

// report sends r until the daemon answers: reports are idempotent.
func (c *loadClient) report(g api.Grant, r api.Report) {
	_, _, apiErr := c.retry(op{kind: "report", worker: c.name, job: g.Job.ID, lease: g.Lease, report: r}, func(ctx context.Context, d *api.Client) (opAnswer, error) {
		rr, err := d.Report(ctx, g.Lease, r)
		return opAnswer{seq: rr.Seq}, err
	})
	if apiErr != nil {
		c.h.violate("%s: report on %d refused: %v", c.name, g.Lease, apiErr)
	}
}

// TestKillUnderLoad SIGKILLs the daemon -kill.runs times under load from
// executors and workers, restarting it on the same data after each kill but
// the last, and holds the clients' records against the log after every
// restart and, offline, at the end.
func TestKillUnderLoad(t *testing.T) {
	seed := *killSeedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	runs := max(1, *killRunsFlag)
	t.Logf("seed %d (-kill.seed=%d replays the kill moments and the clients' choices; not the interleaving)", seed, seed)
	rng := rand.New(rand.NewSource(seed))
	started := time.Now()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")

	h, cl := &ledger{}, &daemons{}
	d := startServeConfig(t, dir, killConfig)
	cl.publish(d.c)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	slots := make(chan struct{}, killBacklog)
	for range killBacklog {
		slots <- struct{}{}
	}
	var wg sync.WaitGroup
	start := func(name string, run func(*loadClient)) {
		c := &loadClient{name: name, ctx: ctx, rng: rand.New(rand.NewSource(rng.Int63())), h: h, cl: cl, slots: slots}
		wg.Go(func() { run(c) })
	}
	for i := range killExecutors {
		start(fmt.Sprintf("ex%d", i+1), (*loadClient).executor)
	}
	for i := range killWorkers {
		start(fmt.Sprintf("kw%d", i+1), (*loadClient).worker)
	}
	start("au1", (*loadClient).auditor)

	var log []api.Event // the log as the last check read it
	for kill := 1; kill <= runs; kill++ {
		// The fault under test: a kill at a moment the seeded PRNG picks.
		<-time.After(killMinUp + time.Duration(rng.Int63n(int64(killMaxUp-killMinUp))))
		d.signal(syscall.SIGKILL)
		d.wait()
		verifyReplay(t, data)
		if kill == runs {
			break
		}
		d = startServeConfig(t, dir, killConfig)
		// Checked before the clients may talk to the new daemon: what they
		// were told is all they will have been told by the dead one.
		log, _ = checkHistory(t, h, log, readLog(t, d.c), fmt.Sprintf("after kill %d, online", kill))
		cl.publish(d.c)
	}
	stop()
	cl.publish(nil)
	wg.Wait()
	log, sum := checkHistory(t, h, log, readOffline(t, data), fmt.Sprintf("after kill %d, offline", runs))
	ops, _ := h.snapshot()
	t.Logf("what the run exercised: operations %v; events %v", opsByKind(ops), eventsByType(log))
	t.Logf("kill run: seed=%d kills=%d %s wall=%v", seed, runs, sum, time.Since(started).Round(time.Millisecond))
}

// verifyReplay runs `leaselog replay --verify` on a stopped daemon's data.
func verifyReplay(t *testing.T, data string) {
	t.Helper()
	out, err := exec.Command(binary, "replay", "--data", data, "--verify").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "verified:") {
		t.Fatalf("replay --verify after a kill: %v\n%s", err, tailOf(string(out), 4096))
	}
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
