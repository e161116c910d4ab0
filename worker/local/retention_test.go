package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
)

// Retention removes the directories of runs that ended more than the
// retention ago, worktrees through their repository, and keeps the refs
// they brought back; a running job's directory and a young one stay.
func TestPruneRemovesOldEndedRuns(t *testing.T) {
	t.Parallel()
	repo := newRepo(t)
	e, _ := newExecutor(t, t.TempDir(), time.Second)

	wt := grant(t, "wt", 1, api.Spec{Checkout: &api.Checkout{Repo: repo},
		Run: `echo agent > agent.txt && git add -A && git commit -q -m "agent work"`})
	plain := grant(t, "plain", 2, api.Spec{Run: "echo hello"})
	young := grant(t, "young", 3, api.Spec{Run: "true"})
	outWT := await(t, start(t, e, wt))
	wantOutcome(t, outWT, "succeeded", "")
	wantOutcome(t, await(t, start(t, e, plain)), "succeeded", "")
	wantOutcome(t, await(t, start(t, e, young)), "succeeded", "")

	ready, release := fifo(t, "ready"), fifo(t, "release")
	running := grant(t, "running", 4, api.Spec{Run: "echo up > " + q(ready) + "; read x < " + q(release)})
	r := start(t, e, running)
	readFIFO(t, ready)

	// Age the ended runs (their exit files) and the running one's files: a
	// week ago, all but young.
	old := time.Now().Add(-7 * 24 * time.Hour)
	for _, g := range []api.Grant{wt, plain, running} {
		state := filepath.Join(runDirOf(e, g), stateDir)
		ents, err := os.ReadDir(state)
		if err != nil {
			t.Fatal(err)
		}
		for _, ent := range ents {
			if err := os.Chtimes(filepath.Join(state, ent.Name()), old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Not a run directory: never touched.
	stray := filepath.Join(e.Dir(), "notes")
	if err := os.Mkdir(stray, 0o755); err != nil {
		t.Fatal(err)
	}

	// A removal cut short (the worker stopped): its tombstone goes.
	tomb := filepath.Join(e.Dir(), ".cut-9.removing")
	if err := os.MkdirAll(filepath.Join(tomb, stateDir), 0o755); err != nil {
		t.Fatal(err)
	}

	removed := e.Prune(context.Background(), time.Now(), 24*time.Hour)
	if fileExists(tomb) {
		t.Error("the tombstone of a removal cut short is still there")
	}
	want := []string{runDirOf(e, plain), runDirOf(e, wt)}
	if strings.Join(removed, "\n") != strings.Join(want, "\n") {
		t.Fatalf("removed:\n%s\nwant:\n%s", strings.Join(removed, "\n"), strings.Join(want, "\n"))
	}
	for _, g := range []api.Grant{wt, plain} {
		if fileExists(runDirOf(e, g)) {
			t.Errorf("%s still there", runDirOf(e, g))
		}
	}
	for _, dir := range []string{runDirOf(e, young), runDirOf(e, running), stray} {
		if !fileExists(dir) {
			t.Errorf("%s removed", dir)
		}
	}
	// The ref and its commit stay; the repository forgot the worktree.
	if got := gitT(t, repo, "log", "--format=%s", "-1", outWT.Ref); got != "agent work" {
		t.Errorf("ref %s after retention: %q", outWT.Ref, got)
	}
	if list := gitT(t, repo, "worktree", "list"); strings.Contains(list, runDirOf(e, wt)) {
		t.Errorf("the repository still lists the removed worktree:\n%s", list)
	}

	// The running job, held by this executor and alive, is kept even far
	// past its retention; once it ended and aged, it goes.
	if removed := e.Prune(context.Background(), time.Now().Add(365*24*time.Hour), time.Hour); len(removed) != 1 || removed[0] != runDirOf(e, young) {
		t.Fatalf("a year on, with the job running: removed %q", removed)
	}
	writeFIFO(t, release, "go\n")
	await(t, r)
	if removed := e.Prune(context.Background(), time.Now().Add(365*24*time.Hour), time.Hour); len(removed) != 1 || removed[0] != runDirOf(e, running) {
		t.Fatalf("a year on, the job ended: removed %q", removed)
	}
}

// A run is kept while its executor holds it, even ended on disk: a
// re-attached run whose outcome the worker has yet to collect.
func TestPruneKeepsHeldRuns(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Second)
	g := grant(t, "held", 1, api.Spec{Run: "true"})
	await(t, start(t, e, g))
	e.hold(runDirOf(e, g))
	later := time.Now().Add(time.Hour)
	if removed := e.Prune(context.Background(), later, time.Minute); len(removed) != 0 {
		t.Fatalf("removed a held run: %q", removed)
	}
	e.release(runDirOf(e, g))
	if removed := e.Prune(context.Background(), later, time.Minute); len(removed) != 1 {
		t.Fatalf("released run not removed: %q", removed)
	}
}

// RunRetention's first round comes at once, at the injected clock; no
// retention removes nothing and returns.
func TestRunRetentionUsesItsClock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, _ := newExecutor(t, dir, time.Second)
	g := grant(t, "old", 1, api.Spec{Run: "true"})
	await(t, start(t, e, g))

	e.RunRetention(context.Background()) // Retention 0: keeps everything, returns at once
	if !fileExists(runDirOf(e, g)) {
		t.Fatal("removed with no retention")
	}

	clocked, err := New(Options{Dir: dir, Retention: time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); clocked.RunRetention(ctx) }()
	deadline := time.Now().Add(waitBound)
	for fileExists(runDirOf(e, g)) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling a condition, with a bound
	}
	cancel()
	<-done
	if fileExists(runDirOf(e, g)) {
		t.Fatal("RunRetention did not remove a run ended two hours before its clock's now")
	}
}

func TestPruneInterval(t *testing.T) {
	for _, tc := range []struct{ keep, want time.Duration }{
		{time.Second, time.Minute},
		{2 * time.Hour, 12 * time.Minute},
		{7 * 24 * time.Hour, time.Hour},
	} {
		if got := PruneInterval(tc.keep); got != tc.want {
			t.Errorf("PruneInterval(%v) = %v, want %v", tc.keep, got, tc.want)
		}
	}
}

func TestNewRefusesNegativeRetention(t *testing.T) {
	if _, err := New(Options{Dir: t.TempDir(), Retention: -time.Second}); err == nil {
		t.Fatal("negative retention accepted")
	}
}
