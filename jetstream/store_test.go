package jetstream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/internal/testkit/linearize"
	"github.com/leaselog/leaselog/lease"
)

// open opens a store on the servers' stream "T" with its cache in dir.
func open(t testing.TB, dir string, replicas int, servers ...*server.Server) *Store {
	t.Helper()
	s, err := openErr(dir, replicas, servers...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openFor is open with timeout for Options.Timeout.
func openFor(t testing.TB, dir string, replicas int, timeout time.Duration, servers ...*server.Server) *Store {
	t.Helper()
	s, err := openTimeout(dir, replicas, timeout, servers...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func openErr(dir string, replicas int, servers ...*server.Server) (*Store, error) {
	return openTimeout(dir, replicas, 15*time.Second, servers...)
}

func openTimeout(dir string, replicas int, timeout time.Duration, servers ...*server.Server) (*Store, error) {
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.ClientURL())
	}
	return Open(context.Background(), Options{
		Servers: urls, Stream: "T", Replicas: replicas, Dir: dir,
		Log:     eventlog.Options{Logger: zerolog.Nop()},
		Logger:  zerolog.Nop(),
		Timeout: timeout,
	})
}

var start = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// service opens the lease service on s's log, on a manual clock.
func service(t testing.TB, s *Store, clock *clocktest.Clock) *lease.Service {
	t.Helper()
	svc, err := lease.Open(s.Log(), lease.Options{Config: leasetest.Timing(), Clock: clock, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// recorded opens the service of s, the active daemon, and makes a job's
// life through a client of it whose calls are recorded: where every fault
// scenario starts. It returns the service, the record (the calls and,
// once the test records them, the events acknowledged), that client, and
// the job's running lease.
func recorded(t testing.TB, s *Store, clock *clocktest.Clock) (*lease.Service, *acked, linearize.Daemon, uint64) {
	t.Helper()
	svc := service(t, s, clock)
	ack := &acked{calls: linearize.NewRecorder()}
	d := ack.calls.Client("test", daemonOf(svc))
	return svc, ack, d, life(t, d, "j")
}

// life runs jobs through a daemon (daemonOf a service, or a recorder's
// client of one): a finishes (and goes to the archive), b runs, c stays
// queued. It returns the lease of b.
func life(t testing.TB, d linearize.Daemon, prefix string) uint64 {
	t.Helper()
	ctx := context.Background()
	for _, j := range []string{"a", "b", "c"} {
		if _, _, err := d.Submit(ctx, api.Submit{ID: prefix + j, Kind: "run", Spec: []byte(`{"cmd":"true"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	grants, err := d.Acquire(ctx, "w1", 2, 0)
	if err != nil || len(grants) != 2 {
		t.Fatalf("acquire: %v %v", grants, err)
	}
	for _, g := range grants {
		if _, err := d.Start(ctx, "w1", g.Lease); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Report(ctx, grants[0].Lease, api.Report{Worker: "w1", Outcome: event.OutcomeSucceeded.String()}); err != nil {
		t.Fatal(err)
	}
	return grants[1].Lease
}

// dump is everything a cache holds that the stream determines: the events
// and the archive.
func dump(t testing.TB, log *eventlog.Log) []string {
	t.Helper()
	var out []string
	it := log.Iter(1)
	for it.Next() {
		e := it.Event()
		out = append(out, fmt.Sprintf("%s id=%s time=%d", e, e.ID, e.Time))
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if err := log.ScanArchive(nil, func(k, v []byte) error {
		out = append(out, fmt.Sprintf("archive %x=%x", k, v))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func closeAll(t testing.TB, svc *lease.Service, s *Store) {
	t.Helper()
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestRestartKeepsEveryAppend(t *testing.T) {
	ns := runServer(t)
	dir := t.TempDir()
	clock := clocktest.New(start)
	s := open(t, dir, 1, ns)
	svc := service(t, s, clock)
	running := life(t, daemonOf(svc), "j")
	var ack acked
	ack.record(t, s.Log())
	before := dump(t, s.Log())
	closeAll(t, svc, s)

	s = open(t, dir, 1, ns)
	if got := dump(t, s.Log()); !slices.Equal(got, before) {
		t.Fatalf("after a restart the cache holds\n%v\nwant\n%v", got, before)
	}
	clock.Advance(time.Second)
	svc = service(t, s, clock)
	defer closeAll(t, svc, s)
	ctx := context.Background()
	if j, err := svc.Job(ctx, "ja"); err != nil || j.Outcome != event.OutcomeSucceeded {
		t.Fatalf("job ja after restart: %+v, %v", j, err)
	}
	if _, err := svc.Heartbeat(ctx, "w1", []uint64{running}); err != nil {
		t.Fatalf("heartbeat of lease %d after restart: %v", running, err)
	}
	// Appending after the restart: the stream continues where it was.
	if _, _, err := svc.Submit(ctx, "jd", event.KindRun, nil); err != nil {
		t.Fatal(err)
	}
	ack.record(t, s.Log())
	info, err := s.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != s.StreamSeq() {
		t.Fatalf("stream ends at %d, the cache at %d", info.State.LastSeq, s.StreamSeq())
	}
	checkFinished(t, &ack, 1, []*server.Server{ns}, s)
}

func TestDeletedCacheIsRebuiltIdentically(t *testing.T) {
	ns := runServer(t)
	dir := t.TempDir()
	clock := clocktest.New(start)
	s := open(t, dir, 1, ns)
	svc := service(t, s, clock)
	life(t, daemonOf(svc), "j")
	var ack acked
	ack.record(t, s.Log())
	before := dump(t, s.Log())
	closeAll(t, svc, s)
	if len(before) == 0 || !slices.ContainsFunc(before, func(l string) bool { return l[:7] == "archive" }) {
		t.Fatalf("the life left no archive to rebuild: %v", before)
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, 1, ns)
	defer s.Close()
	if got := dump(t, s.Log()); !slices.Equal(got, before) {
		t.Fatalf("the rebuilt cache holds\n%v\nwant\n%v", got, before)
	}
	// A second daemon's cache, in another folder, is the same too.
	other := open(t, t.TempDir(), 1, ns)
	defer other.Close()
	if got := dump(t, other.Log()); !slices.Equal(got, before) {
		t.Fatalf("another daemon's cache holds\n%v\nwant\n%v", got, before)
	}
	checkFinished(t, &ack, 1, []*server.Server{ns}, s, other)
}

func TestStaleWriterIsRefusedAndFailStops(t *testing.T) {
	ns := runServer(t)
	ctx := context.Background()
	dirA := t.TempDir()
	clock := clocktest.New(start)
	a := open(t, dirA, 1, ns)
	svcA := service(t, a, clock)
	life(t, daemonOf(svcA), "a")
	var ack acked
	ack.record(t, a.Log())

	// B opens while A still runs: it catches up and appends (its
	// daemon.started, then a job): A's view is no longer the stream's end.
	b := open(t, t.TempDir(), 1, ns)
	svcB := service(t, b, clock)
	defer closeAll(t, svcB, b)
	if _, _, err := svcB.Submit(ctx, "b1", event.KindRun, nil); err != nil {
		t.Fatal(err)
	}
	ack.record(t, b.Log())

	_, _, err := svcA.Submit(ctx, "a-late", event.KindRun, nil)
	if !errors.Is(err, lease.ErrFailed) {
		t.Fatalf("the deposed daemon's submit: %v, want lease.ErrFailed", err)
	}
	if err := a.Log().Err(); !errors.Is(err, eventlog.ErrFailed) || !errors.Is(err, ErrDeposed) {
		t.Fatalf("the deposed daemon's log: %v, want eventlog.ErrFailed and ErrDeposed", err)
	}
	if _, err := svcA.Acquire(ctx, "w1", 1); !errors.Is(err, lease.ErrFailed) {
		t.Fatalf("the deposed daemon after its failure: %v, want lease.ErrFailed", err)
	}
	_ = svcA.Close()
	if err := a.Close(); !errors.Is(err, ErrDeposed) {
		t.Fatalf("close of the deposed store: %v, want its failure", err)
	}

	// A restarts: its cache held the refused batch, and is rebuilt; what B
	// appended is there, the refused job is not, nothing acknowledged is lost.
	want := dump(t, b.Log())
	a = open(t, dirA, 1, ns)
	defer a.Close()
	got := dump(t, a.Log())
	if !slices.Equal(got, want) {
		t.Fatalf("the restarted daemon's cache holds\n%v\nwant the stream's\n%v", got, want)
	}
	for _, job := range []string{"aa", "ab", "ac", "b1"} {
		if !slices.ContainsFunc(got, func(l string) bool { return containsField(l, "job="+job) }) {
			t.Errorf("acknowledged job %s is missing from the log", job)
		}
	}
	if slices.ContainsFunc(got, func(l string) bool { return containsField(l, "job=a-late") }) {
		t.Error("the refused job is in the log")
	}
	checkFinished(t, &ack, 1, []*server.Server{ns}, a, b)
}

func containsField(line, field string) bool {
	for i := 0; i+len(field) <= len(line); i++ {
		if line[i:i+len(field)] == field && (i+len(field) == len(line) || line[i+len(field)] == ' ') {
			return true
		}
	}
	return false
}

func TestConcurrentAppendsAllAcknowledgedInOrder(t *testing.T) {
	ns := runServer(t)
	s := open(t, t.TempDir(), 1, ns)
	const writers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				e := event.Event{Type: event.TypeQueued, ID: ulid.Make(), Time: start.UnixNano(),
					Job: fmt.Sprintf("w%d-%d", w, i), Kind: event.KindRun}
				if err := s.Log().Append([]event.Event{e}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var ack acked
	ack.record(t, s.Log())
	if got := s.StreamSeq(); got != writers*each {
		t.Fatalf("stream seq %d after %d appends", got, writers*each)
	}
	want := dump(t, s.Log())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	other := open(t, t.TempDir(), 1, ns)
	defer other.Close()
	if got := dump(t, other.Log()); !slices.Equal(got, want) {
		t.Fatalf("the stream holds\n%v\nwant what was acknowledged\n%v", got, want)
	}
	checkFinished(t, &ack, 1, []*server.Server{ns}, other)
}

func TestAPebbleStoreIsNotACache(t *testing.T) {
	ns := runServer(t)
	dir := t.TempDir()
	log, err := eventlog.Open(dir, eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Append([]event.Event{{Type: event.TypeDaemonStarted, ID: ulid.Make(), Time: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := openErr(dir, 1, ns); !errors.Is(err, ErrNotCache) {
		t.Fatalf("open on a Pebble store: %v, want ErrNotCache", err)
	}
	if ok, err := eventlog.Exists(dir, nil); err != nil || !ok {
		t.Fatalf("the Pebble store is gone: %v %v", ok, err)
	}
}
