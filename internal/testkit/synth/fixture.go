package synth

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/projection"
)

// Dir is where fixtures are kept between benchmark runs:
// $LEASELOG_BENCH_DIR, or leaselog-bench in the temp dir. `make bench-clean`
// removes it.
func Dir() string {
	if d := os.Getenv("LEASELOG_BENCH_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "leaselog-bench")
}

// Fixture returns the directory of a store holding the log of shape s with
// at least history events of finished jobs, then its live leases, and, if
// snapshot is set, a snapshot of the whole table at its end. It is built the
// first time and reused after: the directory's name says what it holds, and a
// "complete" marker is written last, so a build that was interrupted is
// started again.
func Fixture(s Shape, history int, snapshot bool) (string, error) {
	name := fmt.Sprintf("w%d-h%d-k%d-s%d-live%d-events%d-snap%v", s.Wave, s.Heartbeats, s.Workers, s.StaleEvery, s.Live, history, snapshot)
	if s.Renew != 0 {
		name += fmt.Sprintf("-renew%v", s.Renew)
	}
	if snapshot {
		name += fmt.Sprintf("-v%d", projection.SnapshotVersion) // a snapshot of another format would be skipped
	}
	name += fmt.Sprintf("-f%d", eventlog.ArchiveFormat) // a new store's, never compacted
	dir := filepath.Join(Dir(), name)
	if _, err := os.Stat(filepath.Join(dir, "complete")); err == nil {
		// Open it once for writing, so that a fixture an older build wrote
		// gains what Open adds to such a store (the time index).
		log, err := eventlog.Open(dir, eventlog.Options{Logger: zerolog.Nop()})
		if err != nil {
			return "", fmt.Errorf("synth: open fixture %s: %w", name, err)
		}
		return dir, log.Close()
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	log, err := eventlog.Open(dir, eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		return "", err
	}
	// The table folds every batch as the daemon does, so that the archive
	// records of the jobs that end are written with their events.
	table := projection.New()
	table.SetRetire(projection.RetireRecord)
	err = s.Events(1, history, func(batch []event.Event) error {
		c, err := log.Stage(batch, func(evs []event.Event) ([]eventlog.Record, error) {
			for i := range evs {
				if err := table.Apply(&evs[i]); err != nil {
					return nil, err
				}
			}
			return table.TakeRetired(), nil
		})
		if err != nil {
			return err
		}
		return c.Wait()
	})
	if err == nil && snapshot {
		err = log.PutSnapshot(table.Seq(), table.Snapshot())
	}
	if cerr := log.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("synth: build fixture %s: %w", name, err)
	}
	return dir, os.WriteFile(filepath.Join(dir, "complete"), nil, 0o644)
}

// CopyStore copies the store in dir (a fixture) to to, which must not
// exist: for a benchmark that changes what it is given (a compaction).
func CopyStore(dir, to string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if rel == "complete" || d.Name() == "LOCK" {
			return nil
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, src); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
