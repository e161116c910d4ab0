package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/api"
)

// A job's own timing and its progress, end to end: `leaselog submit
// --toleration-seconds` records the job's own timing within the daemon's
// bounds (plugins.executor.max_toleration_seconds), a toleration past them
// is refused naming the field; the daemon's own worker runs the job, which
// writes its progress at $LEASELOG_PROGRESS, and the job's view shows it
// from the worker's next heartbeat on.
func TestE2EOwnTimingAndProgress(t *testing.T) {
	dir := t.TempDir()
	cfg := strings.Replace(config(1), "[plugins.executor]\n", "[plugins.executor]\nmax_toleration_seconds = 60\n", 1)
	d := startServeConfig(t, dir, cfg)
	data := filepath.Join(dir, "data")
	out, code := cli(t, "", nil, "submit", "--server", d.url, "--data", data, "--id", "too-long", "--kind", "run",
		"--toleration-seconds", "61", "--", "true")
	if code == 0 || !strings.Contains(out, "toleration_seconds: must be at most max_toleration_seconds (60), is 61") {
		t.Fatalf("submit past the bound: %d %s", code, out)
	}
	if out, code := cli(t, "", nil, "submit", "--server", d.url, "--data", data, "--id", "timed", "--kind", "run",
		"--toleration-seconds", "3", "--", `printf '{"step": 1}' > "$LEASELOG_PROGRESS"; exec sleep 60`); code != 0 {
		t.Fatalf("submit: %d %s", code, out)
	}
	want := api.Timing{RenewSeconds: 0.1, GraceSeconds: 0.5, TolerationSeconds: 3}
	var j api.Job
	waitFor(t, "the job's progress in its view", func() bool {
		j = job(t, d.c, "timed")
		return string(j.Details) == `{"step":1}`
	})
	if j.Timing == nil || *j.Timing != want || j.Lease == nil || j.Lease.Timing == nil || *j.Lease.Timing != want {
		t.Fatalf("job %+v, want its own timing %+v on it and its lease", j, want)
	}
	if _, err := d.c.Kill(context.Background(), "timed"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Job(context.Background(), "too-long"); err == nil {
		t.Fatal("the refused submission made a job")
	}
}
