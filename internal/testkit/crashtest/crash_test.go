package crashtest

import (
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
)

// crashRounds is how many rounds of every transition the crash test runs:
// about 100 write operations each, each a crash point three times over.
const crashRounds = 7

// unsynced are the UnsyncedDataPercent values every crash point is cloned
// with: exactly what was synced, half of the rest at random, and everything.
var unsynced = [...]int{0, 50, 100}

// modeOf is how the clones of each kind are checked. A crash image with torn
// or partial unsynced data is what a restart must cope with, so the 0% and
// 50% clones are restarted as the daemon would; the 100% clones (every write
// kept) are verified offline, which costs a third as much.
func modeOf(percent int) Mode {
	if percent == 100 {
		return Offline
	}
	return Restart
}

// crashPoint is one clone of the store, taken before write operation k.
type crashPoint struct {
	k       int64
	op      errorfs.Op
	percent int
	fs      *vfs.MemFS
	mark    Mark
}

func (p crashPoint) String() string {
	return fmt.Sprintf("crash before write %d (%v %s), unsynced %d%%, %d events acknowledged, %v",
		p.k, p.op.Kind, p.op.Path, p.percent, p.mark.Events, modeOf(p.percent))
}

// TestCrashAtEveryWrite runs a real lease.Service through every transition
// (Driver.Round) on a crashable in-memory filesystem and, before every write
// operation the store makes (creates, writes, syncs, renames, removes, on
// every file), takes a crash clone of it with 0%, 50% and 100% of the
// unsynced data kept. Each clone is reopened as a restart would (Check):
// Verify passes, snapshot + tail == the full fold, every event acknowledged
// before the crash is there with the same content, every other event is the
// one the service attempted at that seq (the run's final log), and a service
// opened on it holds the fold of its log.
//
// The scenario runs once; the clones are checked while it runs, on as many
// goroutines as there are cores.
func TestCrashAtEveryWrite(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (the RNG of the 50%% clones)", seed)
	mem := vfs.NewCrashableMem()
	rec := &Record{}
	points := make(chan crashPoint, 2*len(unsynced))
	w := CountWrites(mem, func(k int64, op errorfs.Op) error {
		m := rec.Mark() // before the clone: all it counts was synced by now
		for _, pct := range unsynced {
			fs := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(seed, uint64(k)))})
			points <- crashPoint{k: k, op: op, percent: pct, fs: fs, mark: m}
		}
		return nil
	})

	var (
		mu       sync.Mutex
		tails    []crashPoint // points whose store held events past the acknowledged ones
		tailEvs  [][]event.Event
		counts   = map[int]int{}
		distinct = map[int]int{}
		seen     = map[string]bool{}
		failed   int
		orphans  []string // clones Pebble refuses to open: see markerWithoutManifest
	)
	var wg sync.WaitGroup
	for range max(2, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range points {
				// Crash points between two syncs leave the same image at 0%:
				// the same image with the same acknowledgements is the same
				// check, done once.
				key, err := imageKey(p.fs, p.percent, p.mark)
				if err != nil {
					t.Error(err)
					continue
				}
				mu.Lock()
				counts[p.percent]++
				dup := seen[key]
				seen[key] = true
				mu.Unlock()
				if dup {
					continue
				}
				c, err := Check(p.fs, rec.Acked(p.mark), p.mark.Snapshot, modeOf(p.percent))
				mu.Lock()
				distinct[p.percent]++
				if err != nil && p.percent != 0 && p.percent != 100 {
					if m, ok := markerWithoutManifest(p.fs); ok {
						orphans = append(orphans, fmt.Sprintf("%v: %s", p, m))
						err = nil
					}
				}
				if err != nil {
					if failed++; failed <= 5 {
						t.Errorf("%v: %v", p, err)
					}
				} else if len(c.Tail) > 0 {
					tails, tailEvs = append(tails, p), append(tailEvs, c.Tail)
				}
				mu.Unlock()
			}
		}()
	}

	d := &Driver{FS: w.FS(), Clock: clocktest.New(clocktest.Epoch), Rec: rec}
	err := d.Run(Step{"open", d.Open})
	for r := 0; r < crashRounds && err == nil; r++ {
		for _, s := range d.Round(r) {
			if err = d.Run(s); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = d.Close()
	}
	w.Stop()
	close(points)
	wg.Wait()
	if err != nil {
		t.Fatalf("scenario: %v", err)
	}

	// What the service attempted: the whole run, from its store closed cleanly.
	final, err := eventlog.Open(Dir, eventlog.Options{FS: mem, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	attempted, err := Attempted(final)
	if err != nil {
		t.Fatal(err)
	}
	if err := final.Close(); err != nil {
		t.Fatal(err)
	}
	if all := rec.Acked(rec.Mark()); len(all) != len(attempted) {
		t.Fatalf("the run acknowledged %d events; its store holds %d", len(all), len(attempted))
	}
	for i, p := range tails {
		if err := CheckAttempted(tailEvs[i], attempted); err != nil {
			t.Errorf("%v: %v", p, err)
		}
	}

	total := 0
	for _, pct := range unsynced {
		total += counts[pct]
		t.Logf("unsynced %3d%%: %d crash points, %d distinct images checked", pct, counts[pct], distinct[pct])
	}
	t.Logf("%d crash points over %d writes, %d events; %d held unacknowledged events, all attempted ones",
		total, w.Writes(), len(attempted), len(tails))
	for _, o := range orphans {
		t.Logf("Pebble refuses to open (a crash state that needs unordered directory entries): %s", o)
	}
	if failed > 5 {
		t.Errorf("... and %d more crash points failed", failed-5)
	}
	if total < 2000 {
		t.Errorf("only %d crash points; the scenario should give at least 2,000", total)
	}
}

// markerWithoutManifest reports whether fs holds a store whose newest
// MANIFEST marker names a MANIFEST that is not there, and names both. Pebble
// creates a MANIFEST, syncs it, creates the marker that names it and only then
// syncs the directory: a crash before that sync in which the marker's entry
// survived and the MANIFEST's did not leaves a store Pebble refuses to open
// ("could not open manifest file"). No filesystem that keeps directory
// operations in order (ext4, XFS: metadata is journaled in order) can leave
// that state, but vfs.MemFS's crash clones keep each unsynced entry at random,
// so a clone with some unsynced data kept may. Opening fails, which is
// fail-safe: nothing wrong is served, and the durable log is still on disk.
func markerWithoutManifest(fs vfs.FS) (string, bool) {
	names, err := fs.List(Dir)
	if err != nil {
		return "", false
	}
	var marker string
	iter := -1
	for _, n := range names {
		var i int
		var manifest string
		if _, err := fmt.Sscanf(n, "marker.manifest.%06d.%s", &i, &manifest); err == nil && i > iter {
			iter, marker = i, n
		}
	}
	if marker == "" {
		return "", false
	}
	manifest := marker[strings.LastIndexByte(marker, '.')+1:]
	if _, err := fs.Stat(fs.PathJoin(Dir, manifest)); err == nil {
		return "", false
	}
	return fmt.Sprintf("%s names %s, which is not in %v", marker, manifest, names), true
}

// imageKey identifies what a crash point checks: the files of the store and
// what had been acknowledged, and how it is checked.
func imageKey(fs vfs.FS, percent int, m Mark) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%v %d %d\n", modeOf(percent), m.Events, m.Snapshot)
	names, err := fs.List(Dir)
	if err != nil {
		return fmt.Sprintf("no store: %v %v", err, m), nil
	}
	slices.Sort(names)
	for _, n := range names {
		f, err := fs.Open(fs.PathJoin(Dir, n))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\n", n)
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
	}
	return string(h.Sum(nil)), nil
}
