package replay_test

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
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

// The stores under testdata are written by a build of leaselog and kept, so
// that every later build is tested against them (upgrade_test.go): a build
// that changes the store format writes a store of its own beside them, once,
// with
//
//	go test ./replay -run TestWriteStoreFixture -replay.write-store
//
// which writes testdata/format<N>-store, N the format this build writes, and
// refuses to overwrite one: a committed store is what an older build wrote,
// and must stay so.
var writeStore = flag.Bool("replay.write-store", false, "write testdata/format<N>-store, a store of this build's format holding every kind of event")

func TestWriteStoreFixture(t *testing.T) {
	if !*writeStore {
		t.Skip("writes a fixture: run with -replay.write-store")
	}
	dst := filepath.Join("testdata", fmt.Sprintf("format%d-store", eventlog.CurrentFormat))
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s exists (%v): a committed store is never rewritten", dst, err)
	}
	// Written in memory, where a write-ahead log is as long as what was
	// written to it (on disk its size runs ahead, in zeros: eventlog's
	// walsize.go), then copied out.
	fs := vfs.NewMem()
	writeEveryKind(t, fs)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	names, err := fs.List(leasetest.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if name == "LOCK" || name == "alive" { // not the store's: Pebble's lock, the daemon's mark
			continue
		}
		f, err := fs.Open(fs.PathJoin(leasetest.Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// writeEveryKind writes, in a store on fs (in leasetest.Dir), a log holding every type of
// event, through the service on a manual clock:
//
//	r1   run, spec and result: acquired, running, heartbeats, reported with a
//	     ref; its heartbeats compacted into a lease.heartbeats summary once
//	     it ended a retention ago
//	c1   cancelled while queued
//	e1   evaluation: its worker w2 unreachable, the lease expired, w2's late
//	     report kept as a lease.stale_report, w2 reachable again; queued again
//	     and reported failed by w1
//	k1   killed while leased (lease.revoked), reported killed
//	x1   its worker lost it (lease.lost): failed, "worker lost"
//	p1   an evaluation capped at one requeue, lost twice: failed
//	     "lost 2 times" (lease.failed)
//	     the daemon away past grace (daemon.resumed), stopped (daemon.stopping,
//	     which cancels s1), started again (daemon.started)
//	l1   a live lease, running, a heartbeat; q1 queued
//
// and snapshots (at the stop and at the close).
func writeEveryKind(t *testing.T, fs vfs.FS) {
	t.Helper()
	clock := clocktest.New(clocktest.Epoch)
	open := func() (*eventlog.Log, *lease.Service) {
		return leasetest.Open(t, leasetest.FS(fs), leasetest.Clock(clock),
			leasetest.Service(func(o *lease.Options) { o.HeartbeatRetention = time.Minute }))
	}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	grant := func(svc *lease.Service, worker, job string) uint64 {
		t.Helper()
		gs, err := svc.Acquire(ctx, worker, 1)
		if err != nil || len(gs) != 1 || gs[0].Job.ID != job {
			t.Fatalf("%s acquires %s: %+v, %v", worker, job, gs, err)
		}
		return gs[0].Lease
	}
	submit := func(svc *lease.Service, id string, kind event.Kind, spec string) {
		t.Helper()
		_, _, err := svc.Submit(ctx, id, kind, []byte(spec))
		must(nil, err)
	}
	log, svc := open()
	submit(svc, "r1", event.KindRun, `{"run":"make test","checkout":{"repo":"/src","ref":"main"}}`)
	r1 := grant(svc, "w1", "r1")
	must(svc.Start(ctx, "w1", r1))
	for range 3 {
		clock.Advance(time.Second)
		must(svc.Heartbeat(ctx, "w1", []uint64{r1}))
	}
	must(svc.Report(ctx, "w1", r1, lease.Report{Outcome: event.OutcomeSucceeded, Ref: "refs/leaselog/r1/2", Result: []byte(`{"score":0.9}`)}))

	submit(svc, "c1", event.KindRun, `{"run":"true"}`)
	must(svc.Cancel(ctx, "c1"))

	submit(svc, "e1", event.KindEvaluation, `{"run":"make eval"}`)
	e1 := grant(svc, "w2", "e1")
	for range int(leasetest.Timing().Toleration/time.Second) + 2 { // steps under grace: no absence
		clock.Advance(time.Second)
		must(nil, svc.Sweep())
	}
	if _, err := svc.Report(ctx, "w2", e1, lease.Report{Outcome: event.OutcomeSucceeded, Reason: "late"}); !errors.Is(err, lease.ErrStaleLease) {
		t.Fatalf("w2's late report: %v, want it stale", err)
	}
	must(svc.Heartbeat(ctx, "w2", nil))
	e1 = grant(svc, "w1", "e1")
	must(svc.Report(ctx, "w1", e1, lease.Report{Outcome: event.OutcomeFailed, Reason: "exit status 2"}))

	submit(svc, "k1", event.KindRun, `{"run":"sleep 100"}`)
	k1 := grant(svc, "w1", "k1")
	must(svc.Kill(ctx, "k1"))
	must(svc.Report(ctx, "w1", k1, lease.Report{Outcome: event.OutcomeKilled}))

	submit(svc, "x1", event.KindRun, `{"run":"true"}`)
	x1 := grant(svc, "w1", "x1")
	must(svc.Report(ctx, "w1", x1, lease.Report{Outcome: event.OutcomeLost, Reason: "self-fenced"}))

	one := 1
	_, _, err := svc.SubmitItem(ctx, lease.SubmitItem{ID: "p1", Kind: event.KindEvaluation, Spec: []byte(`{"run":"crash"}`), MaxRequeues: &one})
	must(nil, err)
	for range 2 {
		p1 := grant(svc, "w1", "p1")
		must(svc.Report(ctx, "w1", p1, lease.Report{Outcome: event.OutcomeLost, Reason: "its supervisor died"}))
	}

	clock.Advance(2 * leasetest.Timing().Grace) // away, unswept: the next command records daemon.resumed
	submit(svc, "s1", event.KindRun, `{"run":"true"}`)
	must(nil, svc.Stop(ctx, lease.CancelQueued))
	must(nil, svc.Close())
	must(nil, log.Close())

	clock.Advance(time.Minute)
	log, svc = open()
	if st, _, err := svc.Compact(); err != nil || st.Heartbeats == 0 {
		t.Fatalf("compaction of r1's heartbeats: %+v, %v", st, err)
	}
	submit(svc, "l1", event.KindRun, `{"run":"sleep 100"}`)
	l1 := grant(svc, "w1", "l1")
	must(svc.Start(ctx, "w1", l1))
	must(svc.Heartbeat(ctx, "w1", []uint64{l1})) // a live lease's, never compacted
	submit(svc, "q1", event.KindEvaluation, `{"run":"make eval"}`)
	must(nil, svc.Close())
	must(nil, log.Close())
}

// TestEveryKindIsWritten: the fixture's log holds every type of event, so
// that a store it writes tests the reading of each.
func TestEveryKindIsWritten(t *testing.T) {
	fs := vfs.NewMem()
	writeEveryKind(t, fs)
	fullFold(t, fs, leasetest.Dir) // it verifies
	log, err := eventlog.Open(leasetest.Dir, eventlog.Options{FS: fs, Logger: zerolog.Nop(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	seen := map[event.Type]bool{}
	it := log.Iter(1)
	for it.Next() {
		seen[it.Event().Type] = true
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	for _, typ := range event.Types() {
		if !seen[typ] {
			t.Errorf("no %s event", typ)
		}
	}
}

// fullFold is Verify's full fold of the store in dir on fs (nil: the OS
// filesystem), opened read-only.
func fullFold(t *testing.T, fs vfs.FS, dir string) *projection.Table {
	t.Helper()
	log, err := eventlog.Open(dir, eventlog.Options{FS: fs, Logger: zerolog.Nop(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	rep, err := replay.Verify(log)
	if err != nil {
		t.Fatal(err)
	}
	return rep.Table
}

// checkIntact opens the store in dir, written by an older build or this
// one, as the daemon does, and checks through the service's reads that it
// holds every job and every lease of the log's full fold (before the open
// wrote anything), as the fold has them, and recognises every stale report
// the log holds, sent again, by its seq.
func checkIntact(t *testing.T, dir string) (*eventlog.Log, *lease.Service) {
	t.Helper()
	full := fullFold(t, nil, dir)
	var acquired, stale []event.Event
	{
		ro, err := eventlog.Open(dir, eventlog.Options{Logger: zerolog.Nop(), ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []struct {
			typ event.Type
			out *[]event.Event
		}{{event.TypeAcquired, &acquired}, {event.TypeStaleReport, &stale}} {
			it := ro.Query(eventlog.Query{Type: q.typ})
			for it.Next() {
				*q.out = append(*q.out, it.Event().Clone())
			}
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if err := ro.Close(); err != nil {
			t.Fatal(err)
		}
	}
	log, svc := leasetest.Open(t, leasetest.Disk(dir), leasetest.Config(timing.Default()), leasetest.Clock(clocktest.New(clocktest.Epoch)))
	jobs := full.Jobs(projection.JobFilter{})
	if len(jobs) == 0 || len(acquired) == 0 {
		t.Fatalf("the store holds %d jobs and %d leases: nothing to check", len(jobs), len(acquired))
	}
	for _, want := range jobs {
		got, err := svc.Job(ctx, want.ID)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("job %s: %+v, %v\nwant %+v", want.ID, got, err, want)
		}
	}
	for _, e := range acquired {
		want, _ := full.Lease(e.Seq)
		got, err := svc.Lease(ctx, e.Seq)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("lease %d: %+v, %v\nwant %+v", e.Seq, got, err, want)
		}
	}
	for _, e := range stale {
		a, err := svc.Report(ctx, e.Worker, e.Lease, lease.Report{Outcome: e.Outcome, Ref: e.Ref, Reason: e.Reason, Result: e.Result})
		if !errors.Is(err, lease.ErrStaleLease) || !a.Stale || a.Seq != e.Seq {
			t.Errorf("stale report seq %d sent again: %+v, %v; want it recognised", e.Seq, a, err)
		}
	}
	return log, svc
}

// copyStore copies the committed store in testdata/name to a fresh
// directory, which the test may write.
func copyStore(t *testing.T, name string) string {
	t.Helper()
	src := filepath.Join("testdata", name)
	dir := t.TempDir()
	files, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(src, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
