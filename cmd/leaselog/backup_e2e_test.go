package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
)

// backupText is the configuration of the backup tests' daemons: the e2e
// timing, no local worker, and tokens for each role.
func backupText() string {
	return config(0) + `
[auth]
admin = ["admin-token-0123456789"]
auditor = ["auditor-token-0123456789"]
[auth.workers]
w1 = "w1-token-0123456789"
`
}

const (
	backupAdmin   = "admin-token-0123456789"
	backupAuditor = "auditor-token-0123456789"
	backupWorker  = "w1-token-0123456789"
)

func tokenClient(t *testing.T, url, token string) *api.Client {
	t.Helper()
	c, err := api.NewClient(url, token)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// load is an executor submitting jobs and a worker taking and reporting
// them, against a daemon, until stopped; it keeps what was acknowledged.
type load struct {
	mu        sync.Mutex
	submitted []string // jobs whose submission was answered
	reported  map[string]uint64
	errs      []error
	stop      chan struct{}
	wg        sync.WaitGroup
}

func startLoad(admin, worker *api.Client) *load {
	l := &load{reported: map[string]uint64{}, stop: make(chan struct{})}
	ctx := context.Background()
	l.wg.Add(2)
	go func() {
		defer l.wg.Done()
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			default:
			}
			id := fmt.Sprintf("j%d", i)
			_, _, err := admin.Submit(ctx, api.Submit{ID: id, Kind: "evaluation", Spec: json.RawMessage(`{"run":"true"}`)})
			l.record(err, func() { l.submitted = append(l.submitted, id) })
		}
	}()
	go func() {
		defer l.wg.Done()
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			gs, err := worker.Acquire(ctx, "w1", 4, 50*time.Millisecond)
			l.record(err, func() {})
			for _, g := range gs {
				r, err := worker.Report(ctx, g.Lease, api.Report{Worker: "w1", Outcome: "succeeded"})
				l.record(err, func() { l.reported[g.Job.ID] = r.Seq })
			}
		}
	}()
	return l
}

func (l *load) record(err error, ok func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errs = append(l.errs, err)
		return
	}
	ok()
}

// acked returns what was acknowledged so far.
func (l *load) acked() ([]string, map[string]uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.submitted...), maps.Clone(l.reported)
}

func (l *load) end(t *testing.T) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	if len(l.errs) > 0 {
		t.Fatalf("the load failed: %v", errors.Join(l.errs...))
	}
}

// TestE2EBackupUnderLoad: `leaselog backup` of a daemon that submits,
// grants and reports all along writes a copy holding every event
// acknowledged before the command began; `replay --verify` passes on it,
// and `serve --data COPY` starts from it with every job acknowledged before,
// reported ones reported, at their seqs.
func TestE2EBackupUnderLoad(t *testing.T) {
	d := startServeConfig(t, t.TempDir(), backupText())
	admin := tokenClient(t, d.url, backupAdmin)
	ld := startLoad(admin, tokenClient(t, d.url, backupWorker))
	testutil.Eventually(t, 20*time.Second, "the load under way", func() bool {
		jobs, reports := ld.acked()
		return len(jobs) >= 30 && len(reports) >= 10
	})
	jobs, reports := ld.acked()
	h, err := admin.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	restored := t.TempDir()
	to := filepath.Join(restored, "data") // where startServeConfig serves from
	out, code := cli(t, "", childEnv(), "backup", "--server", d.url, "--token", backupAdmin, "--to", to, "-o", "json")
	ld.end(t)
	if code != 0 {
		t.Fatalf("backup: exit %d\n%s", code, out)
	}
	var b api.Backup
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatalf("backup's answer %q: %v", out, err)
	}
	if b.To != to || b.Seq < h.Seq || b.Files == 0 || b.Bytes == 0 {
		t.Fatalf("backup %+v; the daemon was at seq %d before it", b, h.Seq)
	}
	for job, seq := range reports {
		if seq > b.Seq {
			t.Fatalf("%s's report, seq %d, was acknowledged before the backup began, which holds up to %d", job, seq, b.Seq)
		}
	}
	t.Logf("backup of seq %d (the daemon was at %d before it): %d jobs submitted and %d reported before it", b.Seq, h.Seq, len(jobs), len(reports))

	if out, err := cliOK(t, "replay", "--data", to, "--verify"); err != nil || !strings.Contains(out, fmt.Sprintf("verified: %d events", b.Seq)) {
		t.Fatalf("replay --verify of the copy: %v\n%s", err, out)
	}

	r := startServeConfig(t, restored, backupText())
	rc := tokenClient(t, r.url, backupAdmin)
	ctx := context.Background()
	for _, id := range jobs {
		j, err := rc.Job(ctx, id)
		if err != nil {
			t.Fatalf("job %s, acknowledged before the backup: %v", id, err)
		}
		if seq, ok := reports[id]; ok && (j.State != "reported" || j.Outcome != "succeeded") {
			t.Fatalf("job %s, reported at seq %d before the backup: %+v", id, seq, j)
		}
	}
	es, err := rc.Events(ctx, api.EventQuery{After: b.Seq, Limit: 1})
	if err != nil || len(es.Events) != 1 || es.Events[0].Type != "daemon.started" {
		t.Fatalf("the restored daemon's first event: %+v, %v; want daemon.started after seq %d", es.Events, err, b.Seq)
	}
	if orig, err := admin.Events(ctx, api.EventQuery{After: b.Seq - 1, Limit: 1}); err != nil || len(orig.Events) != 1 ||
		!sameEvent(orig.Events[0], mustEvent(t, rc, b.Seq)) {
		t.Fatalf("seq %d differs: the daemon's %+v, the copy's %+v (%v)", b.Seq, orig.Events, mustEvent(t, rc, b.Seq), err)
	}
}

func mustEvent(t *testing.T, c *api.Client, seq uint64) api.Event {
	t.Helper()
	es, err := c.Events(context.Background(), api.EventQuery{After: seq - 1, Limit: 1})
	if err != nil || len(es.Events) != 1 || es.Events[0].Seq != seq {
		t.Fatalf("event %d: %+v, %v", seq, es.Events, err)
	}
	return es.Events[0]
}

func sameEvent(a, b api.Event) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// cliOK runs a command of the binary and returns its output, and an error
// for a non-zero exit.
func cliOK(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, code := cli(t, "", childEnv(), args...)
	if code != 0 {
		return out, fmt.Errorf("exit %d", code)
	}
	return out, nil
}

// TestE2EBackupRefusals: `leaselog backup` refuses, with a message and a
// non-zero exit, a caller that is not an admin and a directory that cannot
// take the copy, and writes nothing.
func TestE2EBackupRefusals(t *testing.T) {
	d := startServeConfig(t, t.TempDir(), backupText())
	root := t.TempDir()
	full := filepath.Join(root, "full")
	if err := os.Mkdir(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "notes"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := testutil.DirSums(t, root)
	fresh := filepath.Join(root, "b1")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--token", backupAuditor, "--to", fresh}, "forbidden"},
		{[]string{"--token", backupWorker, "--to", fresh}, "forbidden"},
		{[]string{"--to", fresh}, "unauthorized"},
		{[]string{"--token", backupAdmin}, "--to DIR is required"},
		{[]string{"--token", backupAdmin, "--to", "b1"}, "--to b1: give an absolute path"},
		{[]string{"--token", backupAdmin, "--to", full}, full + " exists and is not empty"},
		{[]string{"--token", backupAdmin, "--to", filepath.Join(root, "none", "b1")}, "its parent"},
	} {
		out, code := cli(t, root, childEnv(), append([]string{"backup", "--server", d.url}, tc.args...)...)
		if code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("backup %v: exit %d, %q; want a failure saying %q", tc.args, code, out, tc.want)
		}
		if after := testutil.DirSums(t, root); !maps.Equal(after, before) {
			t.Fatalf("backup %v wrote:\n%v\nwas\n%v", tc.args, after, before)
		}
		if names, _ := os.ReadDir(root); len(names) != 1 {
			t.Fatalf("backup %v left %v", tc.args, names)
		}
	}
}

// TestE2EBackupOnJetStream: a daemon of engine jetstream refuses a backup,
// naming the tool that backs its stream up, and writes nothing.
func TestE2EBackupOnJetStream(t *testing.T) {
	ns := runNATS(t)
	d := startServeConfig(t, t.TempDir(), jetStreamText(ns.ClientURL()))
	to := filepath.Join(t.TempDir(), "b1")
	out, code := cli(t, "", childEnv(), "backup", "--server", d.url, "--to", to)
	if code == 0 || !strings.Contains(out, "backup_elsewhere") || !strings.Contains(out, "nats stream backup LEASELOG DIR") {
		t.Fatalf("backup of a jetstream daemon: exit %d, %q; want a refusal naming nats stream backup", code, out)
	}
	if _, err := os.Stat(to); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s: %v, want nothing written", to, err)
	}
}
