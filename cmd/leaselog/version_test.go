package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersionCommand: the version names the Go toolchain; as JSON, every
// field. In a test binary the revision is not stamped: TestE2EVersion checks
// it on the real binary.
func TestVersionCommand(t *testing.T) {
	out, _, err := runCLI("version")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "leaselog ") || !strings.HasPrefix(lines[1], "revision ") ||
		lines[2] != "go       "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("version:\n%s", out)
	}
	out, _, err = runCLI("version", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil || v["goversion"] != runtime.Version() || v["version"] == "" || v["revision"] == "" {
		t.Fatalf("version -o json: %s (%v)", out, err)
	}
	if _, _, err := runCLI("version", "-o", "yaml"); err == nil {
		t.Fatal("version -o yaml: no error")
	}
}

// TestE2EVersion: the binary built from a git checkout names the commit it
// was built from, as git does. It is built again with -buildvcs=true when
// the harness's is not stamped (GOFLAGS=-buildvcs=false turns stamping
// off): the link is all that build redoes.
func TestE2EVersion(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (git rev-parse: %v): the binary has no revision to check", err)
	}
	revision := func(bin string) string {
		t.Helper()
		out, err := exec.Command(bin, "version", "-o", "json").Output()
		if err != nil {
			t.Fatal(err)
		}
		var v struct{ Revision string }
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatal(err)
		}
		return v.Revision
	}
	rev := revision(binary)
	if rev == "unknown" { // the harness's build was not stamped
		bin := filepath.Join(t.TempDir(), "leaselog")
		if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
			t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
		}
		// The toolchain's own reading of the binary says whether it was
		// stamped at all: go does not stamp every checkout (a linked git
		// worktree is not), and then there is no revision to check.
		if m, err := exec.Command("go", "version", "-m", bin).Output(); err != nil {
			t.Fatalf("go version -m: %v", err)
		} else if !strings.Contains(string(m), "vcs.revision=") {
			t.Skip("go build -buildvcs=true stamps no revision in this checkout (a linked git worktree?): nothing to check")
		}
		rev = revision(bin)
	}
	if rev != strings.TrimSpace(string(head)) {
		t.Fatalf("version revision %q, git HEAD %s", rev, head)
	}
}
