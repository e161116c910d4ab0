package leasetest_test

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
)

func TestTimingIsValid(t *testing.T) {
	if err := leasetest.Timing().Validate(); err != nil {
		t.Fatal(err)
	}
}

// A test restarts the service by opening again on its own filesystem; its
// options reach the store and the service.
func TestOpenAgainOnOneFS(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	clock := clocktest.New(clocktest.Epoch)
	log, svc := leasetest.Open(t, leasetest.FS(fs), leasetest.Clock(clock),
		leasetest.Store(func(o *eventlog.Options) { o.KeepSnapshots = 1 }),
		leasetest.Service(func(o *lease.Options) { o.SnapshotEvery = -1 }))
	if _, _, err := svc.Submit(ctx, "j1", event.KindRun, nil); err != nil {
		t.Fatal(err)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	_, svc = leasetest.Open(t, leasetest.FS(fs), leasetest.Clock(clock))
	if j, err := svc.Job(ctx, "j1"); err != nil || j.ID != "j1" {
		t.Fatalf("job j1 after a restart: %+v, %v", j, err)
	}
}

// On disk, the store is where the test said.
func TestOpenOnDisk(t *testing.T) {
	dir := t.TempDir()
	leasetest.Open(t, leasetest.Disk(dir))
	if ok, err := eventlog.Exists(dir, nil); !ok || err != nil {
		t.Fatalf("store in %s: %v, %v", dir, ok, err)
	}
}
