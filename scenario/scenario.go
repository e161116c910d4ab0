// Package scenario owns the script language of the golden scenarios
// (testdata/scenarios at the top of the repository): a script drives a real
// lease.Service on a crashable in-memory store with a manual clock, and each
// command prints what the service answered and the events it appended. After
// every command the runner checks invariant 3 of the design (a rebuild of
// the log from scratch equals the live table), and after a crash that the
// rebuilt table is the one before it.
//
// Each row of the Leases page (docs/design.md) has a file whose first line names the row
// ("# Word: ...", "# Timing: ...", "# What happens: ..."; a test holds that);
// the other files pin the edges of its diagram and the corners around them.
//
// The same scripts run two ways: from go test (scenario_test.go, through
// cockroachdb/datadriven, which rewrites them with -rewrite), and from the
// binary (`leaselog replay --script FILE`, through Play), so an operator can
// check a scenario with the tool they have. The package imports nothing of
// testing for that reason: it reads the file format itself (script.go).
//
// Commands:
//
//	open [renew=D grace=D toleration=D snapshot-every=N snapshot-interval=D max-requeues=N retention=D segment=N
//	      min-renew=D max-toleration=D]
//	                     max-requeues: the default cap of an evaluation;
//	                     min-renew, max-toleration: the bounds of a job's own timing (none: unbounded);
//	                     retention: the heartbeat retention (none: kept);
//	                     segment: the most heartbeats one summary stands for
//	submit id=J kind=run|evaluation [max-requeues=N] [labels=(k=v, ...)] [priority=N] [not-before=D]
//	       [renew=D grace=D toleration=D]
//	                     (input: the spec, JSON; not-before: D after now;
//	                     renew, grace, toleration: the job's own timing)
//	acquire worker=W [max=N] [kinds=K[,K]] [labels=(k=v, ...)]
//	job id=J             the job as a worker finds it: its place, what it waits for
//	start worker=W lease=L
//	beat worker=W leases=L[,L...] [details=L]  (leases= empty: a bare heartbeat;
//	                     details: the input, JSON, is lease L's details)
//	report worker=W lease=L outcome=O [ref=R] [reason=R]  (input: the result, JSON)
//	                                     (a value with spaces: reason=(two words))
//	cancel job=J | kill job=J
//	stop [keep-queued]   graceful stop: queued jobs cancelled (or kept), daemon.stopping
//	advance D            the clock moves; the daemon does not sweep
//	tick D [beat=W,...]  the clock moves in sweeper steps and the daemon sweeps
//	                     after each; the named workers heartbeat every renew
//	sweep
//	compact              the compactor's passes, until it has nothing more to do
//	crash [unsynced=P] [down=D]
//	                     the process dies; the store keeps what was synced (and
//	                     P% of what was not: 100 is a process killed on a host
//	                     that runs on); the daemon starts again D later
//	restart [down=D]     graceful stop, then start, D later (default 0)
//	table | verify | leases [worker=W] | history job=J | query [type=T] [job=J] [worker=W]
package scenario

import (
	"context"
	"errors"
	"fmt"
	randv2 "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/replay"
	"github.com/leaselog/leaselog/timing"
)

// Runner plays one script: it holds the store, the clock and the service
// between its commands. It is not safe for concurrent use.
type Runner struct {
	fs           *vfs.MemFS
	clock        *clocktest.Clock
	cfg          timing.Config
	snapEvery    int
	snapInterval time.Duration
	maxRequeues  int           // the daemon's default cap on an evaluation's requeues
	retention    time.Duration // of heartbeats, after their job ended
	bounds       timing.Bounds // of a job's own timing
	segment      int           // the most heartbeats one summary stands for
	log          *eventlog.Log
	svc          *lease.Service
	shown        uint64 // the last seq printed
	rebuilt      string // how the last open rebuilt the table, until printed
}

// New returns a Runner with an empty store, the clock at clocktest.Epoch and
// the default timing; the script's first command opens the daemon.
func New() *Runner {
	return &Runner{fs: vfs.NewCrashableMem(), clock: clocktest.New(clocktest.Epoch), cfg: timing.Default()}
}

// Close closes the store, if open.
func (r *Runner) Close() {
	if r.log != nil {
		_ = r.log.Close()
		r.log, r.svc = nil, nil
	}
}

// ErrScript is wrapped by the errors of a script that cannot run: an unknown
// command, a missing or malformed argument, a command before open.
var ErrScript = errors.New("scenario: bad script")

// ErrInvariant is wrapped by the errors of a check the runner makes after a
// command: fold(log) != live table, a crash that lost an acknowledged event.
var ErrInvariant = errors.New("scenario: invariant broken")

var ctx = context.Background()

// Do runs one command and returns what it printed. What the service refuses
// is printed ("error: ..."), as a golden file pins it; err is a failure of
// the script or of the runner's checks, named by the command's position.
func (r *Runner) Do(c Command) (string, error) {
	out, err := r.do(c)
	if err == nil && r.svc != nil {
		err = r.checkFold()
	}
	if err != nil {
		return out, fmt.Errorf("%s: %s: %w", c.Pos, c.Name, err)
	}
	return out, nil
}

func (r *Runner) do(c Command) (string, error) {
	var b strings.Builder
	defer func() { r.rebuilt = "" }()
	if c.Name != "open" && r.svc == nil {
		return "", fmt.Errorf("%w: %s before open", ErrScript, c.Name)
	}
	a := args{c: c}
	switch c.Name {
	case "open":
		r.cfg.Renew = a.dur("renew", r.cfg.Renew)
		r.cfg.Grace = a.dur("grace", r.cfg.Grace)
		r.cfg.Toleration = a.dur("toleration", r.cfg.Toleration)
		r.snapEvery = a.int("snapshot-every", -1)
		r.snapInterval = a.dur("snapshot-interval", 0)
		r.maxRequeues = a.int("max-requeues", 0)
		r.retention = a.dur("retention", 0)
		r.segment = a.int("segment", 0)
		r.bounds = timing.Bounds{MinRenew: a.dur("min-renew", 0), MaxToleration: a.dur("max-toleration", 0)}
		if a.err != nil {
			return "", a.err
		}
		if err := r.open(); err != nil {
			return "error: " + err.Error() + "\n", nil
		}
	case "submit":
		kind, err := event.ParseKind(a.str("kind", ""))
		if err != nil {
			kind = 0 // the service refuses it, as it would an unknown kind on the wire
		}
		it := lease.SubmitItem{ID: a.str("id", ""), Kind: kind, Spec: []byte(c.Input)}
		if _, ok := a.has("max-requeues"); ok {
			n := a.int("max-requeues", 0)
			it.MaxRequeues = &n
		}
		a.schedule(r, &it)
		it.Timing = timing.Config{Renew: a.dur("renew", 0), Grace: a.dur("grace", 0), Toleration: a.dur("toleration", 0)}
		if a.err != nil {
			return "", a.err
		}
		j, created, err := r.svc.SubmitItem(ctx, it)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		} else {
			fmt.Fprintf(&b, "job %s %s %s created=%v%s%s\n", j.ID, j.Kind, j.State, created, capNote(j.MaxRequeues), timingNote(j.Timing))
		}
	case "acquire":
		max := a.int("max", 1)
		if a.err != nil {
			return "", a.err
		}
		o := lease.AcquireOptions{Max: max, Start: a.str("start", "false") == "true"}
		if a.offer(&o); a.err != nil {
			return "", a.err
		}
		gs, err := r.svc.AcquireWith(ctx, a.str("worker", ""), o)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
		writeGrants(&b, "", gs)
		if err == nil && len(gs) == 0 {
			b.WriteString("nothing queued\n")
		}
	case "start":
		id := a.uint("lease")
		if a.err != nil {
			return "", a.err
		}
		l, err := r.svc.Start(ctx, a.str("worker", ""), id)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		} else {
			fmt.Fprintf(&b, "lease %d %s\n", l.ID, l.State)
		}
	case "beat":
		ids := a.uints("leases")
		if a.err != nil {
			return "", a.err
		}
		var details map[uint64][]byte
		if _, ok := a.has("details"); ok {
			details = map[uint64][]byte{a.uint("details"): []byte(c.Input)}
		}
		if a.err != nil {
			return "", a.err
		}
		ds, err := r.svc.HeartbeatDetails(ctx, a.str("worker", ""), ids, details)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
		for _, x := range ds {
			fmt.Fprintf(&b, "lease %d: %s\n", x.Lease, x.Directive)
		}
	case "report":
		id := a.uint("lease")
		if a.err != nil {
			return "", a.err
		}
		next := a.int("next", 0)
		if a.err != nil {
			return "", a.err
		}
		o, _ := event.ParseOutcome(a.str("outcome", "")) // an unknown outcome is the service's to refuse
		rep := lease.Report{Outcome: o, Ref: a.str("ref", ""), Reason: a.str("reason", ""), Result: []byte(c.Input)}
		var ans lease.Answer
		var gs []lease.Grant
		var err error
		if _, ok := a.has("next"); ok { // the report carries the next acquire
			o := lease.AcquireOptions{Max: next, Start: a.str("start", "false") == "true"}
			if a.offer(&o); a.err != nil {
				return "", a.err
			}
			ans, gs, err = r.svc.ReportNext(ctx, a.str("worker", ""), id, rep, o)
		} else {
			ans, err = r.svc.Report(ctx, a.str("worker", ""), id, rep)
		}
		fmt.Fprintf(&b, "answer job=%s lease=%d seq=%d stale=%v\n", ans.Job, ans.Lease, ans.Seq, ans.Stale)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
		if _, ok := a.has("next"); ok && err == nil {
			if gs == nil {
				b.WriteString("next: no acquire (the answer repeats an earlier one)\n")
			} else if len(gs) == 0 {
				b.WriteString("next: nothing queued\n")
			}
			writeGrants(&b, "next: ", gs)
		}
	case "submit-batch":
		items, err := batchItems(c.Input)
		if err != nil {
			return "", err
		}
		res, err := r.svc.SubmitBatch(ctx, items)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
		for i, x := range res {
			if x.Err != nil {
				fmt.Fprintf(&b, "%s: error: %v\n", items[i].ID, x.Err)
			} else {
				fmt.Fprintf(&b, "job %s %s %s created=%v%s\n", x.ID, x.Kind, x.State, x.Created, capNote(x.MaxRequeues))
			}
		}
	case "job":
		r.showJob(&b, a.str("id", ""))
	case "cancel", "kill":
		f := r.svc.Cancel
		if c.Name == "kill" {
			f = r.svc.Kill
		}
		j, err := f(ctx, a.str("job", ""))
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		} else {
			fmt.Fprintf(&b, "job %s %s\n", j.ID, j.State)
		}
	case "stop":
		queued := lease.CancelQueued
		if _, ok := a.has("keep-queued"); ok {
			queued = lease.KeepQueued
		}
		if err := r.svc.Stop(ctx, queued); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	case "advance":
		d := a.pos()
		if a.err != nil {
			return "", a.err
		}
		r.clock.Advance(d)
	case "sweep":
		if err := r.svc.Sweep(); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	case "compact":
		var st lease.CompactStats
		for more := true; more; {
			var pass lease.CompactStats
			var err error
			if pass, more, err = r.svc.Compact(); err != nil {
				fmt.Fprintf(&b, "error: %v\n", err)
				break
			}
			st.CompactStats.Add(pass.CompactStats)
			st.Jobs, st.Cursor = st.Jobs+pass.Jobs, pass.Cursor
		}
		fmt.Fprintf(&b, "compacted jobs=%d heartbeats=%d summaries=%d snapshots-dropped=%d cursor=%d\n",
			st.Jobs, st.Heartbeats+st.Summaries, st.Summaries, st.Snapshots, st.Cursor)
	case "tick":
		d, workers := a.pos(), a.list("beat")
		if a.err != nil {
			return "", a.err
		}
		if err := r.tick(d, workers, &b); err != nil {
			return "", err
		}
	case "crash":
		pct, down := a.int("unsynced", 0), a.dur("down", 0)
		if a.err != nil {
			return "", a.err
		}
		if err := r.crash(pct); err != nil {
			return "", err
		}
		r.clock.Advance(down)
		if err := r.open(); err != nil {
			return "error: " + err.Error() + "\n", nil
		}
	case "restart":
		down := a.dur("down", 0)
		if a.err != nil {
			return "", a.err
		}
		if err := r.svc.Stop(ctx, lease.CancelQueued); err != nil {
			return "", fmt.Errorf("stop: %w", err)
		}
		if err := r.svc.Close(); err != nil {
			return "", fmt.Errorf("close the service: %w", err)
		}
		if err := r.log.Close(); err != nil {
			return "", fmt.Errorf("close the log: %w", err)
		}
		r.svc, r.log = nil, nil
		r.clock.Advance(down)
		if err := r.open(); err != nil {
			return "error: " + err.Error() + "\n", nil
		}
	case "table", "leases", "history", "query", "verify":
		return r.read(a)
	default:
		return "", fmt.Errorf("%w: unknown command %q", ErrScript, c.Name)
	}
	b.WriteString(r.rebuilt)
	if err := r.events(&b); err != nil {
		return "", err
	}
	return b.String(), nil
}

// read runs the commands that print what is there and change nothing.
func (r *Runner) read(a args) (string, error) {
	var b strings.Builder
	switch a.c.Name {
	case "table":
		if err := r.events(&b); err != nil {
			return "", err
		}
		rep, err := replay.Verify(r.log) // the full fold: the live table and the archive together
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrInvariant, err)
		}
		b.WriteString(rep.Table.String())
	case "leases":
		ls, err := r.svc.Leases(ctx, projection.LeaseFilter{Worker: a.str("worker", "")})
		if err != nil {
			return "", err
		}
		for _, l := range ls {
			fmt.Fprintf(&b, "lease %d job=%s worker=%s %s\n", l.ID, l.Job, l.Worker, l.State)
		}
		if len(ls) == 0 {
			b.WriteString("no live leases\n")
		}
	case "history", "query":
		q := eventlog.Query{Job: a.str("job", ""), Worker: a.str("worker", "")}
		if tn := a.str("type", ""); tn != "" {
			typ, err := event.ParseType(tn)
			if err != nil {
				return "", fmt.Errorf("%w: %w", ErrScript, err)
			}
			q.Type = typ
		}
		it := r.log.Query(q)
		for it.Next() {
			b.WriteString(r.fmtEvent(it.Event()) + "\n")
		}
		if err := it.Close(); err != nil {
			return "", err
		}
	case "verify":
		rep, err := replay.Verify(r.log)
		if err != nil {
			return "error: " + err.Error() + "\n", nil
		}
		fmt.Fprintf(&b, "ok: %d events, %d snapshots checked\n", rep.Events, rep.Snapshots)
	}
	return b.String(), nil
}

func (r *Runner) open() error {
	log, svc, err := leasetest.OpenErr(leasetest.FS(r.fs), leasetest.Clock(r.clock), leasetest.Config(r.cfg),
		leasetest.Service(func(o *lease.Options) {
			o.SnapshotEvery, o.SnapshotInterval, o.MaxRequeues, o.HeartbeatRetention = r.snapEvery, r.snapInterval, r.maxRequeues, r.retention
			o.Bounds = r.bounds
		}),
		leasetest.Store(func(o *eventlog.Options) { o.SegmentHeartbeats = r.segment }))
	if err != nil {
		return err
	}
	r.log, r.svc = log, svc
	if st := svc.Rebuilt(); st.SnapshotSeq != 0 || st.Events != 0 {
		r.rebuilt = fmt.Sprintf("rebuilt from snapshot at seq %d, then %d events; skipped snapshots %v\n", st.SnapshotSeq, st.Events, st.Skipped)
	}
	if r.shown > log.LastSeq() {
		r.shown = 0 // a crash took back events already shown; show the log again from its start
	}
	return nil
}

// capNote is how a job's answer shows its cap on requeues: not at all
// without one.
func capNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" max_requeues=%d", n)
}

func timingNote(c timing.Config) string {
	if c == (timing.Config{}) {
		return ""
	}
	return " timing=" + event.TimingString(c)
}

// crash kills the process: the store keeps what was synced and pct% of what
// was not. With pct 0, every acknowledged event was synced, so the table
// rebuilt from the store must be the one before.
func (r *Runner) crash(pct int) error {
	var before []byte
	if err := r.svc.View(ctx, func(t *projection.Table) { before = t.Snapshot() }); err != nil {
		return err
	}
	clone := r.fs.CrashClone(vfs.CrashCloneCfg{
		UnsyncedDataPercent: pct,
		RNG:                 randv2.New(randv2.NewPCG(1, 2)),
	})
	_ = r.log.Close() // the clone is taken: what the old process does now cannot reach it
	r.fs, r.svc, r.log = clone, nil, nil
	if pct != 0 {
		return nil
	}
	log, err := eventlog.Open(leasetest.Dir, eventlog.Options{FS: r.fs, Logger: zerolog.Nop()})
	if err != nil {
		return err
	}
	defer log.Close()
	after, _, err := replay.Rebuild(log, zerolog.Nop())
	if err != nil {
		return err
	}
	if !slices.Equal(after.Snapshot(), before) {
		return fmt.Errorf("%w: the table rebuilt after the crash differs from the one before:\n%s", ErrInvariant, after)
	}
	return nil
}

// tick moves the clock like a living daemon: in sweeper steps, sweeping after
// each, with the named workers heartbeating all their live leases every renew.
func (r *Runner) tick(total time.Duration, workers []string, b *strings.Builder) error {
	step := r.cfg.SweepEvery()
	var sinceBeat time.Duration
	for done := time.Duration(0); done < total; done += step {
		r.clock.Advance(step)
		sinceBeat += step
		if sinceBeat >= r.cfg.Renew {
			sinceBeat = 0
			for _, w := range workers {
				gs, err := r.svc.WorkerLeases(ctx, w)
				if err != nil {
					return err
				}
				ids := make([]uint64, len(gs))
				for i, g := range gs {
					ids[i] = g.Lease
				}
				if _, err := r.svc.Heartbeat(ctx, w, ids); err != nil {
					return err
				}
			}
		}
		if err := r.svc.Sweep(); err != nil {
			fmt.Fprintf(b, "error: %v\n", err)
			return nil
		}
	}
	return nil
}

// events prints the events appended since the last print. Runs of heartbeats
// on one lease fold into one line.
func (r *Runner) events(b *strings.Builder) error {
	it := r.log.Iter(r.shown + 1)
	var run []event.Event
	flush := func() {
		switch len(run) {
		case 0:
		case 1:
			b.WriteString(r.fmtEvent(&run[0]) + "\n")
		default:
			f, l := run[0], run[len(run)-1]
			fmt.Fprintf(b, "%d..%d @%s..%s %d × lease.heartbeat job=%s lease=%d worker=%s\n",
				f.Seq, l.Seq, since(f.Time), since(l.Time), len(run), f.Job, f.Lease, f.Worker)
		}
		run = run[:0]
	}
	for it.Next() {
		e := it.Event()
		if e.Type == event.TypeHeartbeat && e.Details == nil && (len(run) == 0 || run[0].Lease == e.Lease && run[len(run)-1].Seq+1 == e.Seq) {
			run = append(run, e.Clone())
		} else if e.Type == event.TypeHeartbeat && e.Details == nil {
			flush()
			run = append(run, e.Clone())
		} else {
			flush()
			b.WriteString(r.fmtEvent(e) + "\n")
		}
		r.shown = e.Seq
	}
	flush()
	return it.Close()
}

func (r *Runner) fmtEvent(e *event.Event) string {
	line := strings.TrimPrefix(e.String(), "seq="+strconv.FormatUint(e.Seq, 10)+" ")
	return fmt.Sprintf("%d @%s %s", e.Seq, since(e.Time), line)
}

// since prints a time as the clock's distance from clocktest.Epoch, which
// keeps the files readable.
func since(ns int64) string {
	return time.Duration(ns - clocktest.Epoch.UnixNano()).String()
}

// checkFold is invariant 3 of the design after every command: a rebuild of
// the log from scratch equals the live table.
func (r *Runner) checkFold() error {
	var live []byte
	var liveDump string
	if err := r.svc.View(ctx, func(t *projection.Table) { live, liveDump = t.Snapshot(), t.String() }); err != nil {
		return err
	}
	rebuilt, _, err := replay.Rebuild(r.log, zerolog.Nop())
	if err != nil {
		return err
	}
	if got := rebuilt.Snapshot(); !slices.Equal(got, live) {
		return fmt.Errorf("%w: fold(log) != live table\n--- live\n%s--- fold\n%s", ErrInvariant, liveDump, rebuilt)
	}
	return nil
}
