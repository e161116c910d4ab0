package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultRetention is how long the run directory of an ended job is kept
// when the configuration says nothing: a week, long enough to look at a
// failure after a weekend.
const DefaultRetention = 7 * 24 * time.Hour

// Run directories are removed by retention (Options.Retention) once their
// job ended longer ago than it: disks fill up with worktrees otherwise. What
// a job brought back stays: refs/leaselog/<job>/<lease> lives in the main
// repository, not in the worktree, and keeps the commits reachable; a
// worktree's entry in its repository goes with it (`git worktree prune`).
//
// A run this executor has started or re-attached and not yet seen end is
// never removed, whatever its age; nor is one whose supervisor still runs
// (a job a restarted worker has yet to re-attach to).

// hold marks a run directory as in use by this executor: retention leaves
// it alone until release.
func (e *Executor) hold(dir string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mu.held[dir]++
}

func (e *Executor) release(dir string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.held[dir]--; e.mu.held[dir] <= 0 {
		delete(e.mu.held, dir)
	}
}

func (e *Executor) isHeld(dir string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mu.held[dir] > 0
}

// Prune removes the run directories under Options.Dir whose job ended more
// than keep before now, and returns those it removed. A directory it cannot
// remove is logged and left for the next round.
func (e *Executor) Prune(ctx context.Context, now time.Time, keep time.Duration) []string {
	if keep <= 0 {
		return nil
	}
	ents, err := os.ReadDir(e.dir)
	if err != nil {
		e.log.Warn().Err(err).Str("dir", e.dir).Msg("local: retention: cannot list run directories")
		return nil
	}
	var removed []string
	for _, ent := range ents {
		if ctx.Err() != nil {
			break
		}
		dir := filepath.Join(e.dir, ent.Name())
		if name := ent.Name(); strings.HasPrefix(name, ".") && strings.HasSuffix(name, tombSuffix) {
			if err := os.RemoveAll(dir); err != nil { // a removal cut short
				e.log.Warn().Err(err).Str("dir", dir).Msg("local: retention: cannot remove a run directory")
			}
			continue
		}
		if _, ok := leaseOfDir(ent.Name(), ""); !ok || !ent.IsDir() || e.isHeld(dir) {
			continue
		}
		ended, ok := endedAt(dir)
		if !ok || now.Sub(ended) <= keep {
			continue
		}
		if err := removeRun(ctx, dir); err != nil {
			e.log.Warn().Err(err).Str("dir", dir).Msg("local: retention: cannot remove a run directory")
			continue
		}
		e.log.Info().Str("dir", dir).Time("ended", ended).Msg("local: retention: run directory removed")
		removed = append(removed, dir)
	}
	return removed
}

// endedAt says when the job of a run directory ended: when its supervisor
// wrote its exit status, or, for a run that vanished without one (its
// supervisor gone), when it last wrote anything. ok is false for a run that
// is not over (or not a run directory at all).
func endedAt(dir string) (time.Time, bool) {
	state := filepath.Join(dir, stateDir)
	if fi, err := os.Stat(filepath.Join(state, exitFile)); err == nil {
		return fi.ModTime(), true
	}
	if _, err := os.Stat(filepath.Join(state, specFile)); err != nil {
		return time.Time{}, false // not ours, or not prepared yet
	}
	if pid, err := readPid(dir); err == nil && groupAlive(pid, dir) {
		return time.Time{}, false
	}
	var last time.Time
	for _, name := range []string{specFile, pidFile, stdoutFile, stderrFile, stopFile, fencedFile} {
		if fi, err := os.Stat(filepath.Join(state, name)); err == nil && fi.ModTime().After(last) {
			last = fi.ModTime()
		}
	}
	return last, true
}

// removeRun removes a run directory, and, for a worktree, its entry in its
// repository (the refs stay). The directory is first renamed to a
// tombstone (.<name>.removing), which is removed whole: a removal cut short
// (the worker stopped) leaves no half run directory that no longer reads as
// ended, only a tombstone the next round finishes.
func removeRun(ctx context.Context, dir string) error {
	common := ""
	if fi, err := os.Lstat(filepath.Join(dir, ".git")); err == nil && fi.Mode().IsRegular() {
		if out, err := git(ctx, dir, "rev-parse", "--path-format=absolute", "--git-common-dir"); err == nil {
			common = strings.TrimSpace(out)
		}
	}
	tomb := filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+tombSuffix)
	if err := os.Rename(dir, tomb); err != nil {
		return err
	}
	if common != "" {
		// Forgets the worktrees whose directories are gone, this one among
		// them; the refs and the commits they keep stay.
		if _, err := git(ctx, common, "worktree", "prune"); err != nil {
			return err
		}
	}
	return os.RemoveAll(tomb)
}

// tombSuffix ends the name of a run directory being removed.
const tombSuffix = ".removing"

// RunRetention removes old run directories (Prune with Options.Retention,
// at Options.Now) every PruneInterval until ctx is done, the first round at
// once: a worker started after a long pause catches up. With no retention
// it returns at once.
func (e *Executor) RunRetention(ctx context.Context) {
	if e.keep <= 0 {
		return
	}
	t := time.NewTicker(PruneInterval(e.keep))
	defer t.Stop()
	for {
		e.Prune(ctx, e.now(), e.keep)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PruneInterval is how often a worker looks for run directories to remove
// under retention keep: a directory outlives its retention by a tenth of it
// at most, and the root is listed at most once a minute, at least once an
// hour.
func PruneInterval(keep time.Duration) time.Duration {
	return min(max(keep/10, time.Minute), time.Hour)
}
