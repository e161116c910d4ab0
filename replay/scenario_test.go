package replay_test

import (
	"context"
	"fmt"
	"math/rand"
	randv2 "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/clocktest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/replay"
)

// TestScenarios runs the golden files in testdata/scenarios. Each drives a
// real lease.Service on a crashable in-memory Pebble with a manual clock, and
// prints what every command answered and which events it appended. After
// every command the harness checks that a rebuild of the log from scratch
// equals the live table. Regenerate with -rewrite and review the diff.
//
// Commands:
//
//	open [renew=D grace=D toleration=D snapshot-every=N snapshot-interval=D]
//	submit id=J kind=run|evaluation      (input: the spec, JSON)
//	acquire worker=W [max=N]
//	start worker=W lease=L
//	beat worker=W leases=L[,L...]        (leases= empty: a bare heartbeat)
//	report worker=W lease=L outcome=O [ref=R] [reason=R]  (input: the result, JSON)
//	cancel job=J | kill job=J
//	advance D            the clock moves; the daemon does not sweep
//	tick D [beat=W,...]  the clock moves in sweeper steps and the daemon sweeps
//	                     after each; the named workers heartbeat every renew
//	sweep
//	crash [unsynced=P]   the process dies; the store keeps what was synced (and
//	                     P% of what was not); the daemon starts again
//	restart              graceful stop, then start
//	table | verify | leases [worker=W] | history job=J | query [type=T] [job=J] [worker=W]
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		s := &scenario{t: t, fs: vfs.NewCrashableMem(), clock: clocktest.New(clocktest.Epoch), cfg: lease.DefaultConfig()}
		defer s.close()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out := s.run(d)
			if s.svc != nil {
				s.checkFold()
			}
			return out
		})
	})
}

type scenario struct {
	t            *testing.T
	fs           *vfs.MemFS
	clock        *clocktest.Clock
	cfg          lease.Config
	snapEvery    int
	snapInterval time.Duration
	log          *eventlog.Log
	svc          *lease.Service
	shown        uint64 // the last seq printed
	rebuilt      string // how the last open rebuilt the table, until printed
}

var ctx = context.Background()

func (s *scenario) run(d *datadriven.TestData) string {
	var b strings.Builder
	defer func() { s.rebuilt = "" }()
	if d.Cmd != "open" && s.svc == nil {
		s.t.Fatalf("%s: %s before open", d.Pos, d.Cmd)
	}
	switch d.Cmd {
	case "open":
		s.cfg.Renew = s.durArg(d, "renew", s.cfg.Renew)
		s.cfg.Grace = s.durArg(d, "grace", s.cfg.Grace)
		s.cfg.Toleration = s.durArg(d, "toleration", s.cfg.Toleration)
		s.snapEvery = s.intArg(d, "snapshot-every", -1)
		s.snapInterval = s.durArg(d, "snapshot-interval", 0)
		if err := s.open(); err != nil {
			return "error: " + err.Error() + "\n"
		}
	case "submit":
		kind, err := event.ParseKind(s.arg(d, "kind", ""))
		if err != nil {
			kind = 0
		}
		j, created, err := s.svc.Submit(ctx, s.arg(d, "id", ""), kind, []byte(d.Input))
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		} else {
			fmt.Fprintf(&b, "job %s %s %s created=%v\n", j.ID, j.Kind, j.State, created)
		}
	case "acquire":
		gs, err := s.svc.Acquire(ctx, s.arg(d, "worker", ""), s.intArg(d, "max", 1))
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
		for _, g := range gs {
			fmt.Fprintf(&b, "lease %d job=%s\n", g.Lease, g.Job.ID)
		}
		if err == nil && len(gs) == 0 {
			b.WriteString("nothing queued\n")
		}
	case "start":
		l, err := s.svc.Start(ctx, s.arg(d, "worker", ""), s.leaseArg(d))
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		} else {
			fmt.Fprintf(&b, "lease %d %s\n", l.ID, l.State)
		}
	case "beat":
		var ids []uint64
		for _, f := range strings.Split(s.arg(d, "leases", ""), ",") {
			if f != "" {
				ids = append(ids, s.parseUint(f))
			}
		}
		ds, err := s.svc.Heartbeat(ctx, s.arg(d, "worker", ""), ids)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
		for _, x := range ds {
			fmt.Fprintf(&b, "lease %d: %s\n", x.Lease, x.Directive)
		}
	case "report":
		o, _ := event.ParseOutcome(s.arg(d, "outcome", ""))
		a, err := s.svc.Report(ctx, s.arg(d, "worker", ""), s.leaseArg(d), lease.Report{
			Outcome: o, Ref: s.arg(d, "ref", ""), Reason: s.arg(d, "reason", ""), Result: []byte(d.Input),
		})
		fmt.Fprintf(&b, "answer job=%s lease=%d seq=%d stale=%v\n", a.Job, a.Lease, a.Seq, a.Stale)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	case "cancel", "kill":
		f := s.svc.Cancel
		if d.Cmd == "kill" {
			f = s.svc.Kill
		}
		j, err := f(ctx, s.arg(d, "job", ""))
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		} else {
			fmt.Fprintf(&b, "job %s %s\n", j.ID, j.State)
		}
	case "stop":
		if err := s.svc.Stop(ctx); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	case "advance":
		s.clock.Advance(s.durPos(d))
	case "sweep":
		if err := s.svc.Sweep(); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	case "tick":
		s.tick(d, &b)
	case "crash":
		var before []byte
		s.must(s.svc.View(ctx, func(t *projection.Table) { before = t.Snapshot() }))
		clone := s.fs.CrashClone(vfs.CrashCloneCfg{
			UnsyncedDataPercent: s.intArg(d, "unsynced", 0),
			RNG:                 randv2.New(randv2.NewPCG(1, 2)),
		})
		_ = s.log.Close() // the clone is taken: what the old process does now cannot reach it
		s.fs, s.svc, s.log = clone, nil, nil
		if s.intArg(d, "unsynced", 0) == 0 {
			// Every acknowledged event was synced: the rebuilt table is the one before.
			log, err := eventlog.Open("data", eventlog.Options{FS: s.fs, Logger: zerolog.Nop()})
			s.must(err)
			after, _, err := replay.Rebuild(log, zerolog.Nop())
			s.must(err)
			if !slices.Equal(after.Snapshot(), before) {
				s.t.Fatalf("%s: the table rebuilt after the crash differs from the one before:\n%s", d.Pos, after)
			}
			s.must(log.Close())
		}
		if err := s.open(); err != nil {
			return "error: " + err.Error() + "\n"
		}
	case "restart":
		s.must(s.svc.Stop(ctx))
		s.must(s.svc.Close())
		s.must(s.log.Close())
		s.svc, s.log = nil, nil
		if err := s.open(); err != nil {
			return "error: " + err.Error() + "\n"
		}
	case "table":
		s.events(&b)
		b.WriteString(s.dump())
		return b.String()
	case "leases":
		ls, err := s.svc.Leases(ctx, projection.LeaseFilter{Worker: s.arg(d, "worker", "")})
		s.must(err)
		for _, l := range ls {
			fmt.Fprintf(&b, "lease %d job=%s worker=%s %s\n", l.ID, l.Job, l.Worker, l.State)
		}
		if len(ls) == 0 {
			b.WriteString("no live leases\n")
		}
		return b.String()
	case "history", "query":
		q := eventlog.Query{Job: s.arg(d, "job", ""), Worker: s.arg(d, "worker", "")}
		if tn := s.arg(d, "type", ""); tn != "" {
			typ, err := event.ParseType(tn)
			s.must(err)
			q.Type = typ
		}
		it := s.log.Query(q)
		for it.Next() {
			b.WriteString(s.fmtEvent(it.Event()) + "\n")
		}
		s.must(it.Close())
		return b.String()
	case "verify":
		rep, err := replay.Verify(s.log)
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		fmt.Fprintf(&b, "ok: %d events, %d snapshots checked\n", rep.Events, rep.Snapshots)
		return b.String()
	default:
		s.t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	b.WriteString(s.rebuilt)
	s.events(&b)
	return b.String()
}

func (s *scenario) open() error {
	log, err := eventlog.Open("data", eventlog.Options{FS: s.fs, Logger: zerolog.Nop()})
	if err != nil {
		return err
	}
	svc, err := lease.Open(log, lease.Options{
		Config: s.cfg, Clock: s.clock, Entropy: rand.New(rand.NewSource(1)), SnapshotEvery: s.snapEvery,
		SnapshotInterval: s.snapInterval,
	})
	if err != nil {
		log.Close()
		return err
	}
	s.log, s.svc = log, svc
	if st := svc.Rebuilt(); st.SnapshotSeq != 0 || st.Events != 0 {
		s.rebuilt = fmt.Sprintf("rebuilt from snapshot at seq %d, then %d events; skipped snapshots %v\n", st.SnapshotSeq, st.Events, st.Skipped)
	}
	if s.shown > log.LastSeq() {
		s.shown = 0 // a crash took back events already shown; show the log again from its start
	}
	return nil
}

// tick moves the clock like a living daemon: in sweeper steps, sweeping after
// each, with the named workers heartbeating all their live leases every renew.
func (s *scenario) tick(d *datadriven.TestData, b *strings.Builder) {
	total, step := s.durPos(d), s.cfg.SweepEvery()
	var workers []string
	if w := s.arg(d, "beat", ""); w != "" {
		workers = strings.Split(w, ",")
	}
	var sinceBeat time.Duration
	for done := time.Duration(0); done < total; done += step {
		s.clock.Advance(step)
		sinceBeat += step
		if sinceBeat >= s.cfg.Renew {
			sinceBeat = 0
			for _, w := range workers {
				gs, err := s.svc.WorkerLeases(ctx, w)
				s.must(err)
				ids := make([]uint64, len(gs))
				for i, g := range gs {
					ids[i] = g.Lease
				}
				_, err = s.svc.Heartbeat(ctx, w, ids)
				s.must(err)
			}
		}
		if err := s.svc.Sweep(); err != nil {
			fmt.Fprintf(b, "error: %v\n", err)
			return
		}
	}
}

// events prints the events appended since the last print. Runs of heartbeats
// on one lease fold into one line.
func (s *scenario) events(b *strings.Builder) {
	it := s.log.Iter(s.shown + 1)
	var run []event.Event
	flush := func() {
		switch len(run) {
		case 0:
		case 1:
			b.WriteString(s.fmtEvent(&run[0]) + "\n")
		default:
			f, l := run[0], run[len(run)-1]
			fmt.Fprintf(b, "%d..%d @%s..%s %d × lease.heartbeat job=%s lease=%d worker=%s\n",
				f.Seq, l.Seq, s.since(f.Time), s.since(l.Time), len(run), f.Job, f.Lease, f.Worker)
		}
		run = run[:0]
	}
	for it.Next() {
		e := it.Event()
		if e.Type == event.TypeHeartbeat && (len(run) == 0 || run[0].Lease == e.Lease && run[len(run)-1].Seq+1 == e.Seq) {
			run = append(run, e.Clone())
		} else if e.Type == event.TypeHeartbeat {
			flush()
			run = append(run, e.Clone())
		} else {
			flush()
			b.WriteString(s.fmtEvent(e) + "\n")
		}
		s.shown = e.Seq
	}
	flush()
	s.must(it.Close())
}

func (s *scenario) fmtEvent(e *event.Event) string {
	line := e.String()
	line = strings.TrimPrefix(line, "seq="+strconv.FormatUint(e.Seq, 10)+" ")
	return fmt.Sprintf("%d @%s %s", e.Seq, s.since(e.Time), line)
}

func (s *scenario) since(ns int64) string {
	return time.Duration(ns - clocktest.Epoch.UnixNano()).String()
}

// dump is the full fold of the log: what the live table and the archive
// hold together (Verify checks that they do).
func (s *scenario) dump() string {
	rep, err := replay.Verify(s.log)
	s.must(err)
	return rep.Table.String()
}

// checkFold is invariant 3 of DESIGN §7 after every command: a rebuild of the
// log from scratch equals the live table.
func (s *scenario) checkFold() {
	s.t.Helper()
	var live []byte
	var liveDump string
	s.must(s.svc.View(ctx, func(t *projection.Table) { live, liveDump = t.Snapshot(), t.String() }))
	rebuilt, _, err := replay.Rebuild(s.log, zerolog.Nop())
	s.must(err)
	if got := rebuilt.Snapshot(); !slices.Equal(got, live) {
		s.t.Fatalf("fold(log) != live table\n--- live\n%s--- fold\n%s", liveDump, rebuilt)
	}
}

func (s *scenario) close() {
	if s.log != nil {
		_ = s.log.Close()
	}
}

func (s *scenario) must(err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatal(err)
	}
}

func (s *scenario) arg(d *datadriven.TestData, key, def string) string {
	if a, ok := d.Arg(key); ok {
		if len(a.Vals) == 0 {
			return ""
		}
		return strings.Join(a.Vals, ",")
	}
	return def
}

func (s *scenario) intArg(d *datadriven.TestData, key string, def int) int {
	v := s.arg(d, key, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	s.must(err)
	return n
}

func (s *scenario) durArg(d *datadriven.TestData, key string, def time.Duration) time.Duration {
	v := s.arg(d, key, "")
	if v == "" {
		return def
	}
	dur, err := time.ParseDuration(v)
	s.must(err)
	return dur
}

func (s *scenario) durPos(d *datadriven.TestData) time.Duration {
	if len(d.CmdArgs) == 0 {
		s.t.Fatalf("%s: %s needs a duration", d.Pos, d.Cmd)
	}
	dur, err := time.ParseDuration(d.CmdArgs[0].Key)
	s.must(err)
	return dur
}

func (s *scenario) leaseArg(d *datadriven.TestData) uint64 {
	return s.parseUint(s.arg(d, "lease", "0"))
}

func (s *scenario) parseUint(v string) uint64 {
	n, err := strconv.ParseUint(v, 10, 64)
	s.must(err)
	return n
}
