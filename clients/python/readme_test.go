package python

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
)

// readmeBlock is the Python block of the main README that follows the
// marker naming this test, and the output the README says it prints.
var readmeBlock = regexp.MustCompile("(?s)<!-- tested: clients/python/readme_test.go[^>]*-->\n```python\n(.*?)```\n\nprints `([^`]*)`")

// TestREADMEWorkerAgainstMakeRun follows the README's Python section: a
// daemon started as `make run` starts it (serve --data ./leaselog-data, no
// [auth], a local worker), and from that directory the README's block,
// which finds ./leaselog-data/token for its Client and
// ./leaselog-data/worker-token for its Worker, and prints what the README
// shows. Two differences, so that the output is the one shown: the daemon
// listens on a free port (LEASELOG_SERVER says which), and its local worker
// (capacity 1) is busy with a job of its own, so that the Python worker
// takes the README's job.
func TestREADMEWorkerAgainstMakeRun(t *testing.T) {
	py := python(t)
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := readmeBlock.FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no Python block marked as tested by this test, followed by what it prints")
	}
	script, want := m[1], string(m[2])
	dir := t.TempDir()
	bin := build(t, dir)
	cfg := filepath.Join(dir, "leaselog.toml")
	if err := os.WriteFile(cfg, []byte("[server]\nlisten = \"127.0.0.1:0\"\n[plugins.executor]\nlocal_capacity = 1\n[log]\nformat = \"json\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cwd := filepath.Join(dir, "repo")
	if err := os.Mkdir(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	addr := serveIn(t, cwd, bin, "--config", cfg, "--data", "./leaselog-data")

	token, err := os.ReadFile(filepath.Join(cwd, "leaselog-data", "token"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := api.NewClient("http://"+addr, strings.TrimSpace(string(token)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spec, _ := json.Marshal(api.Spec{Run: "sleep 300"})
	if _, _, err := c.Submit(ctx, api.Submit{ID: "busy", Kind: "run", Spec: spec}); err != nil {
		t.Fatal(err)
	}
	state := func(want ...string) func() bool {
		return func() bool {
			j, err := c.Job(ctx, "busy")
			return err == nil && slices.Contains(want, j.State)
		}
	}
	t.Cleanup(func() {
		_, _ = c.Kill(ctx, "busy")
		testutil.Eventually(t, 30*time.Second, "busy killed", state("reported", "cancelled"))
	})
	testutil.Eventually(t, 30*time.Second, "the local worker to take busy", state("leased", "running"))

	run, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(run, py, "-c", string(script))
	cmd.Dir = cwd
	cmd.Env = append(environ("LEASELOG_SERVER", "LEASELOG_TOKEN", "LEASELOG_DATA", "PYTHONPATH"),
		"LEASELOG_SERVER="+addr, "PYTHONPATH="+must(filepath.Abs(".")), "PYTHONDONTWRITEBYTECODE=1",
		"TMPDIR="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("the README's block: %v\n%s%s", err, out, stderr)
	}
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("the README's block printed %q; the README says %q", got, want)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
