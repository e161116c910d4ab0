package replay_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/replay"
)

// TestUpgradeFormat1Store: a store written by the build before the archive
// (testdata/format1-store: jobs reported, failed, cancelled, an evaluation
// expired with a stale report and reported later, a live lease, a queued job,
// and two snapshots of the older version) opens, rebuilds by folding the
// whole log, writes the archive of what ended, and is upgraded; the full fold
// is the same before and after, Verify checks the archive, and the service
// answers for every job, lease and stale report of the log (checkIntact),
// those that ended from the archive.
func TestUpgradeFormat1Store(t *testing.T) {
	dir := copyStore(t, "format1-store")
	open := func(readOnly bool) *eventlog.Log {
		t.Helper()
		log, err := eventlog.Open(dir, eventlog.Options{Logger: zerolog.Nop(), ReadOnly: readOnly})
		if err != nil {
			t.Fatal(err)
		}
		return log
	}

	// Read-only, the old store folds whole, in memory, and is left as it is.
	log := open(true)
	before, err := replay.Verify(log)
	if err != nil {
		t.Fatal(err)
	}
	ro, st, err := replay.Rebuild(log, zerolog.Nop())
	if err != nil || st.Upgraded != 0 || st.SnapshotSeq != 0 || ro.String() != before.Table.String() {
		t.Fatalf("read-only rebuild: upgraded %d, snapshot %d, %v:\n%s", st.Upgraded, st.SnapshotSeq, err, ro)
	}
	if log.Format() != 1 {
		t.Fatalf("testdata store is of format %d, want 1", log.Format())
	}
	log.Close()

	// An upgrade cut short before its mark (a crash, a full disk) leaves the
	// store of the old format, its records written or not: the next start
	// does it again.
	log = open(false)
	if _, _, err := replay.Rebuild(noMark{log}, zerolog.Nop()); err == nil || log.Format() != 1 {
		t.Fatalf("upgrade without its mark: %v, format %d; want an error and format 1", err, log.Format())
	}
	log.Close()

	log = open(false)
	table, st, err := replay.Rebuild(log, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	// r1, r2, c1, e1 ended: 4 jobs, their 4 leases, 1 stale report.
	if st.Upgraded != 9 || log.Format() != eventlog.CurrentFormat {
		t.Fatalf("upgrade wrote %d records, store format %d; want 9 and %d", st.Upgraded, log.Format(), eventlog.CurrentFormat)
	}
	if got := table.String(); strings.Contains(got, "job r1") || !strings.Contains(got, "job l1") || !strings.Contains(got, "job q1") {
		t.Fatalf("rebuilt table should hold only the live jobs l1 and q1:\n%s", got)
	}
	after, err := replay.Verify(log) // checks the archive too, now
	if err != nil {
		t.Fatal(err)
	}
	if after.Table.String() != before.Table.String() {
		t.Fatalf("full fold changed by the upgrade:\n%s\nwant\n%s", after.Table, before.Table)
	}
	log.Close()

	_, svc := checkIntact(t, dir)
	if got := svc.Rebuilt(); got.Upgraded != 0 {
		t.Fatalf("second open upgraded again: %d records", got.Upgraded)
	}
	j, err := svc.Job(ctx, "r1")
	if err != nil || j.State != fsm.Reported || string(j.Result) != `{"ok":true}` || j.Ref != "refs/r1" {
		t.Fatalf("job r1 from the archive: %+v, %v", j, err)
	}
	// The stale report recorded by the old build is recognised again.
	a, err := svc.Report(ctx, "w2", 9, lease.Report{Outcome: event.OutcomeSucceeded, Ref: "refs/late"})
	if a.Seq != 16 || !a.Stale {
		t.Fatalf("repeated stale report: %+v, %v; want the answer of seq 16", a, err)
	}
	// r1's report, written by the old build, is read from its log: a retry
	// of it gets its answer, a report that says otherwise is a late claim.
	l, err := svc.Lease(ctx, j.LastLease)
	if err != nil || l.ReportSeq == 0 {
		t.Fatalf("r1's lease from the archive: %+v, %v", l, err)
	}
	if a, err := svc.Report(ctx, l.Worker, l.ID, lease.Report{Outcome: j.Outcome, Reason: "sent again"}); err != nil || a.Stale || a.Seq != l.ReportSeq {
		t.Fatalf("a retry of r1's report: %+v, %v; want the answer of seq %d", a, err, l.ReportSeq)
	}
	if a, err := svc.Report(ctx, l.Worker, l.ID, lease.Report{Outcome: j.Outcome, Ref: "refs/r1-late"}); !errors.Is(err, lease.ErrStaleLease) || !a.Stale || a.Seq <= 16 {
		t.Fatalf("a late claim on r1's lease: %+v, %v; want it stale and kept", a, err)
	}
}

// noMark is a log whose upgrade fails at its last write, the format mark.
type noMark struct{ *eventlog.Log }

func (l noMark) PutArchive(recs []eventlog.Record, upgrade bool) error {
	if upgrade {
		return errors.New("disk full")
	}
	return l.Log.PutArchive(recs, false)
}

// TestUpgradeFormat2Store: a store written by the build of format 2, and
// one by the build of format 3 (testdata/format<N>-store, written by
// TestWriteStoreFixture: every type of event that build knew, jobs ended
// every way, a stale report, a live lease, a queued job, snapshots, the
// archive; format 3 a poison evaluation and compacted heartbeats besides),
// opens with every job, lease and stale report as its log has them, as a
// store of the current format whose live lease goes on where it was.
func TestUpgradeFormat2Store(t *testing.T) {
	for _, format := range []int{2, 3} {
		t.Run(fmt.Sprintf("format%d", format), func(t *testing.T) {
			dir := copyStore(t, fmt.Sprintf("format%d-store", format))
			if full := fullFold(t, nil, dir); full.Seq() == 0 {
				t.Fatal("an empty store")
			}
			ro, err := eventlog.Open(dir, eventlog.Options{Logger: zerolog.Nop(), ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if ro.Format() != format {
				t.Fatalf("testdata store is of format %d, want %d", ro.Format(), format)
			}
			ro.Close()
			log, svc := checkIntact(t, dir)
			if log.Format() != eventlog.CurrentFormat {
				t.Fatalf("opened, the store is of format %d, want %d", log.Format(), eventlog.CurrentFormat)
			}
			gs, err := svc.WorkerLeases(ctx, "w1")
			if err != nil || len(gs) != 1 || gs[0].Job.ID != "l1" {
				t.Fatalf("w1's leases: %+v, %v; want l1's", gs, err)
			}
			if ds, err := svc.Heartbeat(ctx, "w1", []uint64{gs[0].Lease}); err != nil || len(ds) != 1 || ds[0].Directive != lease.Continue {
				t.Fatalf("l1's heartbeat: %+v, %v", ds, err)
			}
			if err := svc.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := replay.Verify(log); err != nil {
				t.Fatalf("verify once written by this build: %v", err)
			}
		})
	}
}
