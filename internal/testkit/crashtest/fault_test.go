package crashtest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/lease"
)

// faultRun is one run of the fault scenario (Open, then one Round: every
// transition and a restart) with write k failing.
type faultRun struct {
	k      int64
	sticky bool // every write from k on fails (a dead disk), not k alone

	mem *vfs.MemFS
	w   *WriteCounter
	d   *Driver

	mu       sync.Mutex
	hit      *errorfs.Op // the write that failed, once one has
	failures int         // writes failed
	death    string      // how the process ended, if it did (Fatalf, stuck)
	image    *vfs.MemFS  // the store at its end
	mark     Mark        // what was acknowledged then
	died     chan struct{}
	finish   chan error
}

func (r *faultRun) String() string {
	mode := "once"
	if r.sticky {
		mode = "from then on"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hit == nil {
		return fmt.Sprintf("write %d failing %s", r.k, mode)
	}
	return fmt.Sprintf("write %d failing %s (%v %s)", r.k, mode, r.hit.Kind, r.hit.Path)
}

// onFatal is the log's OnFatal. In the daemon it exits the process; here the
// process "exits" by taking the crash image of that moment and stopping the
// goroutine that called it for good, so that Pebble, which carries on after a
// Fatalf that returns, does nothing more. The run is then abandoned.
func (r *faultRun) onFatal(msg string) {
	r.mu.Lock()
	r.die("Pebble's Fatalf: %s", pebbleMessage(msg))
	r.mu.Unlock()
	select {} // exit, for this goroutine
}

// stuckAfter is how many failed writes make a run stuck. Pebble retries a
// failed flush at once and for ever, with no backoff: on a dead disk, the
// flush of the WAL that pebble.Open waits for never ends, and Open never
// returns. The daemon would spin there, logging errors, having acknowledged
// nothing more; the test takes that as the process's end, and stops the
// retrying goroutine for good (the injector does not return).
const stuckAfter = 200

// die records that the process ends here, with the crash image of this
// moment. r.mu is held.
func (r *faultRun) die(format string, args ...any) {
	if r.death != "" {
		return
	}
	r.death = fmt.Sprintf(format, args...)
	r.mark = r.d.Rec.Mark() // before the image: all it counts was synced
	r.image = r.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	close(r.died)
	if strings.HasPrefix(r.death, "stuck") {
		r.mu.Unlock()
		select {} // the retrying goroutine stops here
	}
}

// start runs the scenario on its own goroutine; wait waits for it to end or
// for Pebble's Fatalf.
func (r *faultRun) start() {
	r.mem = vfs.NewCrashableMem()
	r.died, r.finish = make(chan struct{}), make(chan error, 1)
	r.w = CountWrites(r.mem, func(k int64, op errorfs.Op) error {
		if isDirSync(op) {
			return nil
		}
		if k == r.k || (r.sticky && k > r.k) {
			r.mu.Lock()
			if r.hit == nil {
				r.hit = &op
			}
			if r.failures++; r.failures == stuckAfter {
				r.die("stuck: Pebble retried a failing write %d times", stuckAfter)
			}
			r.mu.Unlock()
			return errorfs.ErrInjected
		}
		return nil
	})
	r.d = &Driver{FS: r.w.FS(), Clock: clocktest.New(clocktest.Epoch), Rec: &Record{}, OnFatal: r.onFatal}
	go func() { r.finish <- runScenario(r.d) }()
}

func runScenario(d *Driver) error {
	if err := d.Run(Step{"open", d.Open}); err != nil {
		return err
	}
	for _, s := range d.Round(0) {
		if err := d.Run(s); err != nil {
			return err
		}
	}
	return d.Run(Step{"close", d.Close})
}

// TestWriteFaultsFailStop fails the k-th write operation of a scenario (open,
// every transition, a restart, close), for every k, once (a transient error)
// and from then on (a dead disk). Whatever the write (the WAL's, the
// MANIFEST's, an sstable's, a marker's, a directory's sync), the service must
// absorb it (Pebble retries or ignores some) or fail-stop:
//
//   - the first command to see it returns a failure (lease.ErrFailed,
//     eventlog.ErrFailed); or the store does not open, or close; or Pebble
//     calls Fatalf, on which the daemon exits; never another answer;
//   - after a failure, every command, reads included, is refused with
//     lease.ErrFailed, and the log closes without hanging;
//   - a restart on the crash image of the failure (only synced data; for a
//     Fatalf, the image at the call) and, unless the store was left locked,
//     on the store after the close with the disk healthy again, restores
//     every invariant: Verify passes, snapshot + tail == the fold, every
//     acknowledged event is there, and every other is the one the scenario
//     attempted at its seq (its fault-free run: the scenario is
//     deterministic, and a fault only cuts it short).
func TestWriteFaultsFailStop(t *testing.T) {
	ref := &Driver{FS: vfs.NewMem(), Clock: clocktest.New(clocktest.Epoch), Rec: &Record{}}
	if err := runScenario(ref); err != nil {
		t.Fatal(err)
	}
	attempted := ref.Rec.Acked(ref.Rec.Mark())

	outcomes := map[string]int{}
	for _, sticky := range []bool{false, true} {
		for k := int64(0); ; k++ {
			r := &faultRun{k: k, sticky: sticky}
			r.start()
			var runErr error
			select {
			case runErr = <-r.finish:
			case <-r.died:
			}
			r.mu.Lock()
			hit := r.hit != nil
			r.mu.Unlock()
			if !hit {
				if runErr != nil {
					t.Fatalf("%v: no write failed, yet: %v", r, runErr)
				}
				if r.w.Writes() <= k {
					t.Logf("from then on=%v: %d writes, each failed in turn", sticky, k)
					break
				}
				continue // write k syncs the directory: see isDirSync
			}
			outcome, err := r.check(runErr, attempted)
			if err != nil {
				t.Errorf("%v: %v", r, err)
				continue
			}
			outcomes[outcome]++
		}
	}
	keys := make([]string, 0, len(outcomes))
	for o := range outcomes {
		keys = append(keys, o)
	}
	sort.Strings(keys)
	for _, o := range keys {
		t.Logf("%4d runs: %s", outcomes[o], o)
	}
}

// check holds a run whose write failed to the fail-stop contract, and says
// how the run ended.
func (r *faultRun) check(runErr error, attempted []event.Event) (string, error) {
	r.mu.Lock()
	death, image, mark := r.death, r.image, r.mark
	r.mu.Unlock()
	restart := func(what string, fs vfs.FS, m Mark) error {
		c, err := Check(fs, r.d.Rec.Acked(m), m.Snapshot, Restart)
		if err == nil {
			err = CheckAttempted(c.Tail, attempted)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if death != "" {
		// The process ended there; the run is abandoned where it stands.
		return death, restart("restart from the image at its end", image, mark)
	}

	d := r.d
	var outcome string
	switch step, _, _ := strings.Cut(fmt.Sprint(runErr), ":"); {
	case runErr == nil:
		outcome = "absorbed"
	case errors.Is(runErr, ErrOpen):
		outcome = "the store did not open"
	case errors.Is(runErr, ErrClose):
		outcome = "the log did not close"
	case IsFailure(runErr):
		outcome = "fail-stop at " + step
		if d.Svc != nil && !d.Closed() {
			if err := refusesEverything(d.Svc); err != nil {
				return "", fmt.Errorf("%w\n(the failure: %v)", err, runErr)
			}
		}
	default:
		return "", fmt.Errorf("the first error is not a failure: %w", runErr)
	}

	// The process dies now: what survives is what was synced.
	if err := restart("restart from the crash image", r.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}), d.Rec.Mark()); err != nil {
		return "", err
	}
	// Or it stops: the close must return, whatever it says.
	if d.Log != nil && !d.Closed() {
		if d.Svc != nil {
			_ = d.Svc.Close()
		}
		_ = d.Log.Close()
	}
	// And the disk is healthy again. A log that met a fatal error leaves its
	// store locked, as a crash would: the crash image stands for it.
	r.w.Stop()
	err := restart("restart with the disk healthy", r.mem, d.Rec.Mark())
	if errors.Is(err, eventlog.ErrLocked) {
		outcome += " (store left locked)"
		err = nil
	}
	return outcome, err
}

// isDirSync reports whether op syncs the store's directory. A failed one
// makes Pebble panic (atomicfs.Marker.Move: "fsync errors are
// unrecoverable"): on Open's goroutine, eventlog.Open returns it as an error;
// on a background flush's, it kills the process, which no test in this
// process can survive. The fault test leaves those writes alone; what a
// dying process leaves behind is what TestCrashAtEveryWrite checks, and
// eventlog's own tests check how the process dies.
func isDirSync(op errorfs.Op) bool {
	return op.Path == Dir && op.Kind.ReadOrWrite() == errorfs.OpIsWrite && op.Kind != errorfs.OpMkdirAll && op.Kind != errorfs.OpLock
}

// pebbleMessage is the kind of a Fatalf message: its text up to the first
// colon ("MANIFEST sync failed").
func pebbleMessage(msg string) string {
	kind, _, _ := strings.Cut(strings.TrimPrefix(msg, "pebble: "), ":")
	return kind
}

// refusesEverything checks that a failed service refuses every command,
// those that would record nothing included, with lease.ErrFailed.
func refusesEverything(svc *lease.Service) error {
	var errs []error
	for name, call := range map[string]func() error{
		"submit":    func() error { _, _, err := svc.Submit(ctx, "after", event.KindRun, nil); return err },
		"acquire":   func() error { _, err := svc.Acquire(ctx, "w9", 1); return err },
		"heartbeat": func() error { _, err := svc.Heartbeat(ctx, "w1", []uint64{1}); return err },
		"start":     func() error { _, err := svc.Start(ctx, "w1", 1); return err },
		"report": func() error {
			_, err := svc.Report(ctx, "w1", 1, lease.Report{Outcome: event.OutcomeFailed})
			return err
		},
		"cancel": func() error { _, err := svc.Cancel(ctx, "x"); return err },
		"job":    func() error { _, err := svc.Job(ctx, "x"); return err },
		"seq":    func() error { _, err := svc.Seq(ctx); return err },
		"sweep":  svc.Sweep,
		"stop":   func() error { return svc.Stop(ctx, lease.CancelQueued) },
		"err":    svc.Err,
	} {
		if err := call(); !errors.Is(err, lease.ErrFailed) {
			errs = append(errs, fmt.Errorf("after the failure, %s: %v, want lease.ErrFailed", name, err))
		}
	}
	return errors.Join(errs...)
}
