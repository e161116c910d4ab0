// Package leasetest is the one fixture of the tests that need the daemon's
// core: a store and a lease.Service on it, opened as the daemon opens them,
// with the short lease timing the tests run by. A test says only what differs
// from the defaults: its clock, its filesystem (to restart on, or to inject
// faults into), an option of the store or of the service. The scenario
// runner, which `leaselog replay --script` runs too, opens its in-memory
// daemon with it; so it imports no testing package, only what a test passes
// in (TB).
package leasetest

import (
	"math/rand"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/timing"
)

// Dir is the store's directory on a test's filesystem.
const Dir = "data"

// Timing is the lease timing the tests run by: short, so that a test reaches
// every deadline in a few clock steps.
func Timing() timing.Config {
	return timing.Config{Renew: time.Second, Grace: 5 * time.Second, Toleration: 15 * time.Second}
}

// Option changes what Open opens.
type Option func(*setup)

type setup struct {
	dir   string
	store eventlog.Options
	svc   lease.Options
	edits []func(*setup) // Store and Service, applied after the defaults
}

// FS puts the store on fs, in Dir. Without it the store is on a fresh
// vfs.NewMem(); a test that restarts the service, or reads what a crash left,
// makes its own filesystem and passes it to every Open.
func FS(fs vfs.FS) Option { return func(s *setup) { s.store.FS, s.dir = fs, Dir } }

// Disk puts the store on the OS filesystem, in dir (a t.TempDir()), for a test
// that hands the store to something that opens it by path.
func Disk(dir string) Option { return func(s *setup) { s.store.FS, s.dir = vfs.Default, dir } }

// Clock is the clock the service decides by (lease.Options.Clock). Without it
// the service runs on its default clock, the host's.
func Clock(c lease.Clock) Option { return func(s *setup) { s.svc.Clock = c } }

// Config is the service's lease timing. Without it, Timing.
func Config(c timing.Config) Option { return func(s *setup) { s.svc.Config = c } }

// Store changes the store's options after the defaults (the filesystem, a
// logger that drops everything).
func Store(edit func(*eventlog.Options)) Option {
	return func(s *setup) { s.edits = append(s.edits, func(s *setup) { edit(&s.store) }) }
}

// Service changes the service's options after the defaults (the timing, the
// clock, ULIDs drawn from a source seeded with 1, so that runs repeat).
func Service(edit func(*lease.Options)) Option {
	return func(s *setup) { s.edits = append(s.edits, func(s *setup) { edit(&s.svc) }) }
}

// TB is what Open needs of a test: *testing.T, *testing.B and *rapid.T are.
type TB interface {
	Helper()
	Fatal(args ...any)
	Cleanup(func())
}

// Open opens the store and a service on it, and fails t if either does not
// open. The store is closed when the test ends, unless the test closed it;
// the service is not (closing it writes a snapshot: a test that wants one
// says so).
func Open(t TB, opts ...Option) (*eventlog.Log, *lease.Service) {
	t.Helper()
	log, svc, err := OpenErr(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	return log, svc
}

// OpenErr is Open for a caller without a test (a fuzz target's world, built
// once): it returns an error instead, and the caller closes the store.
func OpenErr(opts ...Option) (*eventlog.Log, *lease.Service, error) {
	s := setup{dir: Dir, svc: lease.Options{Config: Timing(), Entropy: rand.New(rand.NewSource(1))}}
	for _, o := range opts {
		o(&s)
	}
	if s.store.FS == nil {
		s.store.FS = vfs.NewMem()
	}
	s.store.Logger = zerolog.Nop()
	for _, edit := range s.edits {
		edit(&s)
	}
	log, err := eventlog.Open(s.dir, s.store)
	if err != nil {
		return nil, nil, err
	}
	svc, err := lease.Open(log, s.svc)
	if err != nil {
		_ = log.Close()
		return nil, nil, err
	}
	return log, svc, nil
}
