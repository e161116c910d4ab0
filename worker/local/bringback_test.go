package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
)

// A job in a worktree commits on its own and leaves a file to bring back:
// both are reachable from the main repository through the lease's ref.
func TestBringBack(t *testing.T) {
	t.Parallel()
	repo := newRepo(t)
	e, _ := newExecutor(t, t.TempDir(), time.Second)
	g := grant(t, "bb", 7, api.Spec{
		Checkout: &api.Checkout{Repo: repo}, // ref: HEAD
		// `git add -A` must not pick up .leaselog/.
		Run: `echo agent > agent.txt && git add -A && git commit -q -m "agent work" &&
mkdir -p out && echo data > out/report.txt && echo scratch > scratch.txt`,
		BringBack: []string{"out/", "missing.txt", "../escape", ".leaselog/stdout"},
	})
	out := await(t, start(t, e, g))
	wantOutcome(t, out, "succeeded", `bring back: "../escape" is not inside the worktree, skipped; `+
		`bring back: ".leaselog/stdout" is leaselog's own, skipped`)
	if out.Ref != "refs/leaselog/bb/7" {
		t.Fatalf("ref %q", out.Ref)
	}

	files := strings.Split(gitT(t, repo, "ls-tree", "-r", "--name-only", out.Ref), "\n")
	if !slices.Equal(files, []string{"agent.txt", "base.txt", "out/report.txt"}) {
		t.Fatalf("tree of %s: %q", out.Ref, files)
	}
	if got := gitT(t, repo, "show", out.Ref+":out/report.txt"); got != "data" {
		t.Fatalf("out/report.txt = %q", got)
	}
	subjects := gitT(t, repo, "log", "--format=%s|%an", out.Ref)
	if want := "leaselog: bring back job bb, lease 7|leaselog\nagent work|Test\nbase|Test"; subjects != want {
		t.Fatalf("history of %s:\n%s\nwant:\n%s", out.Ref, subjects, want)
	}
	// The worktree stays, for auditors; its HEAD is the ref.
	dir := runDirOf(e, g)
	if got, want := gitT(t, dir, "rev-parse", "HEAD"), gitT(t, repo, "rev-parse", out.Ref); got != want {
		t.Fatalf("worktree HEAD %s, ref %s", got, want)
	}
	if !strings.Contains(gitT(t, repo, "worktree", "list"), dir) {
		t.Fatal("worktree removed")
	}
}

// Nothing to bring back: no leaselog commit, and the ref is the checked out
// commit (here a tag, not HEAD). A failed job is brought back too.
func TestBringBackNothingAtRef(t *testing.T) {
	t.Parallel()
	repo := newRepo(t)
	gitT(t, repo, "tag", "v1")
	commitFile(t, repo, "later.txt", "later\n", "later")
	e, _ := newExecutor(t, t.TempDir(), time.Second)
	g := grant(t, "tag:check", 2, api.Spec{
		Checkout:  &api.Checkout{Repo: repo, Ref: "v1"},
		Run:       "test -e base.txt && test ! -e later.txt && exit 2",
		BringBack: []string{"absent/"},
	})
	out := await(t, start(t, e, g))
	wantOutcome(t, out, "failed", "exit status 2")
	if out.Ref != "refs/leaselog/tag%3Acheck/2" {
		t.Fatalf("ref %q", out.Ref)
	}
	if got, want := gitT(t, repo, "rev-parse", out.Ref), gitT(t, repo, "rev-parse", "v1^{commit}"); got != want {
		t.Fatalf("ref at %s, want v1 = %s", got, want)
	}
}

func TestBringBackIsIdempotent(t *testing.T) {
	t.Parallel()
	repo := newRepo(t)
	dir := filepath.Join(t.TempDir(), "wt")
	gitT(t, repo, "worktree", "add", "--detach", dir)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref1, _, err := bringBack(dir, []string{"f"}, "j", 1)
	if err != nil {
		t.Fatal(err)
	}
	head1 := gitT(t, repo, "rev-parse", ref1)
	ref2, _, err := bringBack(dir, []string{"f"}, "j", 1)
	if err != nil {
		t.Fatal(err)
	}
	if ref2 != ref1 || gitT(t, repo, "rev-parse", ref2) != head1 {
		t.Fatalf("second bring back moved the ref: %s %s", ref2, gitT(t, repo, "rev-parse", ref2))
	}
}

func TestRefComponent(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]string{
		"j1":        "j1",
		"eval-3.2":  "eval-3.2",
		"a_b@c":     "a_b@c",
		"tag:check": "tag%3Acheck",
		".hidden":   "%2Ehidden",
		"end.":      "end%2E",
		"a..b":      "a.%2Eb",
		"a...b":     "a.%2E.b",
		"x.lock":    "x%2Elock",
		"@":         "%40",
		"..":        "%2E%2E",
		".":         "%2E",
		"@:.lock":   "@%3A%2Elock",
	} {
		got := refComponent(id)
		if got != want {
			t.Errorf("refComponent(%q) = %q, want %q", id, got, want)
		}
		if out, err := exec.Command("git", "check-ref-format", refName(id, 9)).CombinedOutput(); err != nil {
			t.Errorf("git refuses %s: %v %s", refName(id, 9), err, out)
		}
	}
}

// Bringing back the whole worktree still leaves .leaselog out.
func TestBringBackWholeWorktree(t *testing.T) {
	t.Parallel()
	repo := newRepo(t)
	e, _ := newExecutor(t, t.TempDir(), time.Second)
	g := grant(t, "all", 1, api.Spec{
		Checkout:  &api.Checkout{Repo: repo},
		Run:       "echo new > new.txt",
		BringBack: []string{"."},
	})
	out := await(t, start(t, e, g))
	wantOutcome(t, out, "succeeded", "")
	files := strings.Split(gitT(t, repo, "ls-tree", "-r", "--name-only", out.Ref), "\n")
	if !slices.Equal(files, []string{"base.txt", "new.txt"}) {
		t.Fatalf("tree of %s: %q", out.Ref, files)
	}
}
