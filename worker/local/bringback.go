package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/leaselog/leaselog/api"
)

// The identity of bring-back commits, given through the environment so that
// they work on a machine with no git configuration at all.
var gitIdentity = []string{
	"GIT_AUTHOR_NAME=leaselog", "GIT_AUTHOR_EMAIL=leaselog@localhost",
	"GIT_COMMITTER_NAME=leaselog", "GIT_COMMITTER_EMAIL=leaselog@localhost",
}

// checkout makes dir a detached worktree of c.Repo at c.Ref (default HEAD).
// Detached, so that no branch is held by a worktree an agent may leave
// behind; the agent's commits are kept by the ref bringBack writes.
func checkout(ctx context.Context, c *api.Checkout, dir string) error {
	ref := c.Ref
	if ref == "" {
		ref = "HEAD"
	}
	if _, err := git(ctx, c.Repo, "worktree", "add", "--detach", "--", dir, ref); err != nil {
		return fmt.Errorf("checkout %s at %s: %w", c.Repo, ref, err)
	}
	return nil
}

// bringBack commits the bring_back paths that exist in the worktree dir, if
// that changes anything, and points refs/leaselog/<job>/<lease> at the
// worktree's HEAD. Refs are shared by all worktrees of a repository, so the
// ref keeps the agent's own commits and the brought-back files reachable
// from the main repository, whatever becomes of the worktree. It is
// idempotent: run again (after a restart), it stages nothing new and sets
// the same ref. skipped lists the paths it refused, as notes for the reason.
//
// Paths are literal (no pathspec magic or globs), relative to the worktree
// and inside it; leaselog's own .leaselog folder is never brought back.
// Hooks are off for these commands: a leaselog commit and ref are not the
// repository's to veto.
func bringBack(dir string, paths []string, job string, lease uint64) (ref string, skipped []string, err error) {
	ctx := context.Background() // the job is over: finish what is started
	var specs []string
	for _, p := range paths {
		clean := filepath.Clean(p)
		if p == "" || !filepath.IsLocal(clean) {
			skipped = append(skipped, fmt.Sprintf("bring back: %q is not inside the worktree, skipped", p))
			continue
		}
		if clean == stateDir || strings.HasPrefix(clean, stateDir+string(filepath.Separator)) {
			skipped = append(skipped, fmt.Sprintf("bring back: %q is leaselog's own, skipped", p))
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, clean)); err != nil {
			continue // the job did not make it: nothing to bring
		}
		specs = append(specs, ":(literal)"+filepath.ToSlash(clean))
	}
	if len(specs) > 0 {
		// -f: bring back what the repository ignores too (build outputs).
		args := append([]string{"add", "-f", "--"}, specs...)
		args = append(args, ":(exclude)"+stateDir)
		if _, err := git(ctx, dir, args...); err != nil {
			return "", skipped, err
		}
		staged, err := hasStaged(ctx, dir)
		if err != nil {
			return "", skipped, err
		}
		if staged {
			msg := fmt.Sprintf("leaselog: bring back job %s, lease %d\n\nPaths: %s\n",
				job, lease, strings.Join(paths, ", "))
			if _, err := git(ctx, dir, "-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false",
				"commit", "--quiet", "--no-verify", "-m", msg); err != nil {
				return "", skipped, err
			}
		}
	}
	ref = refName(job, lease)
	if _, err := git(ctx, dir, "-c", "core.hooksPath=/dev/null",
		"update-ref", "-m", fmt.Sprintf("leaselog: job %s, lease %d", job, lease), ref, "HEAD"); err != nil {
		return "", skipped, err
	}
	return ref, skipped, nil
}

// hasStaged reports whether the index of the worktree dir differs from HEAD.
func hasStaged(ctx context.Context, dir string) (bool, error) {
	_, err := git(ctx, dir, "diff", "--cached", "--quiet")
	var exit *exec.ExitError
	switch {
	case err == nil:
		return false, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return true, nil
	}
	return false, err
}

// refName is the ref that keeps what the job of a lease brought back.
func refName(job string, lease uint64) string {
	return "refs/leaselog/" + refComponent(job) + "/" + strconv.FormatUint(lease, 10)
}

// refComponent makes a job id ([A-Za-z0-9._:@-]) a valid ref name component.
// Git refuses ':' anywhere, a component that begins or ends with '.', "..",
// a component ending in ".lock", and "@" alone; those bytes are
// percent-encoded. '%' is not in the id alphabet, so the mapping is one to
// one, and the usual ids (j1, eval-3.2) are left as they are.
func refComponent(job string) string {
	var b strings.Builder
	for i := 0; i < len(job); i++ {
		c := job[i]
		escape := false
		switch c {
		case ':':
			escape = true
		case '.':
			s := b.String()
			escape = i == 0 || i == len(job)-1 || strings.HasSuffix(s, ".") ||
				(i == len(job)-len(".lock") && strings.HasSuffix(job, ".lock"))
		case '@':
			escape = job == "@"
		}
		if escape {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// git runs a git command in dir and returns its output; an error carries
// git's own message. The daemon's GIT_DIR and its kind are dropped, so that
// dir alone says which repository.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !isGitLocationVar(name) {
			env = append(env, kv)
		}
	}
	cmd.Env = append(append(env, "LC_ALL=C", "GIT_TERMINAL_PROMPT=0"), gitIdentity...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return "", fmt.Errorf("git %s: %w: %s", subcommand(args), err, msg)
	}
	return stdout.String(), nil
}

// subcommand names a git command line in an error: its first word that is
// not an option ("-c key=value" included).
func subcommand(args []string) string {
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-c":
			i++
		case !strings.HasPrefix(args[i], "-"):
			return args[i]
		}
	}
	return strings.Join(args, " ")
}
