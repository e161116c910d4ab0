package local

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/worker"
	"github.com/leaselog/leaselog/worker/local/supervise"
)

func TestSucceeds(t *testing.T) {
	// The worker's credential must not reach the job (not parallel: Setenv).
	t.Setenv("LEASELOG_TOKEN", "secret")
	e, logs := newExecutor(t, t.TempDir(), time.Second)
	g := grant(t, "j1", 17, api.Spec{Run: `printf '%s\n' "$LEASELOG_JOB" "$LEASELOG_LEASE" "$LEASELOG_WORKDIR" "$LEASELOG_RESULT" "$(pwd)" "${LEASELOG_TOKEN-unset}"`})
	r := start(t, e, g)
	out := await(t, r)
	wantOutcome(t, out, "succeeded", "")
	if out.Ref != "" || out.Result != nil {
		t.Fatalf("ref %q, result %s; want none without a checkout or a result", out.Ref, out.Result)
	}

	dir := runDirOf(e, g)
	want := strings.Join([]string{"j1", "17", dir, filepath.Join(dir, ".leaselog", "result.json"), dir, "unset"}, "\n") + "\n"
	if got := readState(t, e, g, "stdout"); got != want {
		t.Fatalf("job saw:\n%s\nwant:\n%s", got, want)
	}
	if got := readState(t, e, g, "exit"); got != "0\n" {
		t.Fatalf("exit file %q, want 0", got)
	}
	if got := readState(t, e, g, "spec.json"); got != string(g.Job.Spec) {
		t.Fatalf("spec.json %s, want %s", got, g.Job.Spec)
	}
	if got := readState(t, e, g, ".gitignore"); got != "*\n" {
		t.Fatalf(".gitignore %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, ".leaselog", "exit.tmp")); !os.IsNotExist(err) {
		t.Fatalf("exit.tmp left behind: %v", err)
	}
	for _, msg := range []string{`"local: started"`, `"local: ended"`, `"outcome":"succeeded"`} {
		if !strings.Contains(logs.String(), msg) {
			t.Errorf("log lacks %s:\n%s", msg, logs)
		}
	}
	// Done stays closed and the outcome stays put.
	if !isDone(r) || !sameOutcome(r.Outcome(), out) {
		t.Fatal("outcome changed after Done")
	}
}

func TestFailsWithExitStatus(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Second)
	g := grant(t, "j2", 3, api.Spec{Run: "echo oops >&2; exit 3"})
	out := await(t, start(t, e, g))
	wantOutcome(t, out, "failed", "exit status 3")
	if got := readState(t, e, g, "stderr"); got != "oops\n" {
		t.Fatalf("stderr %q", got)
	}

	g = grant(t, "j2", 4, api.Spec{Run: "no-such-command-here"})
	wantOutcome(t, await(t, start(t, e, g)), "failed", "exit status 127")
}

func TestResult(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Second)
	// A JSON file of the worker's user, outside the run directory: a link
	// to it must not make it the job's result.
	outside := filepath.Join(t.TempDir(), "credentials.json")
	if err := os.WriteFile(outside, []byte(`{"token": "s3cret"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name, run string
		result    string
		reason    string
	}{
		{"valid", `printf '{ "score": 0.75, "notes": ["a", "b"] }' > "$LEASELOG_RESULT"`, `{"score":0.75,"notes":["a","b"]}`, ""},
		{"invalid", `printf '{"score": 0.' > "$LEASELOG_RESULT"`, "", "result ignored: not valid JSON"},
		{"empty", `: > "$LEASELOG_RESULT"`, "", ""},
		{"too large", `head -c 1048577 /dev/zero | tr '\0' 1 > "$LEASELOG_RESULT"`, "", "result ignored: larger than 1048576 bytes"},
		{"named pipe", `mkfifo "$LEASELOG_RESULT"`, "", "result ignored: res-5/.leaselog/result.json is a named pipe, not a regular file"},
		{"symbolic link", `ln -s ` + q(outside) + ` "$LEASELOG_RESULT"`, "", "result ignored: res-6/.leaselog/result.json is a symbolic link, not a regular file"},
		{"hard link", `ln ` + q(outside) + ` "$LEASELOG_RESULT"`, "", "result ignored: res-7/.leaselog/result.json is a regular file with 2 links, not a file of its own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := grant(t, "res", uint64(i+1), api.Spec{Run: tc.run})
			out := await(t, start(t, e, g))
			wantOutcome(t, out, "succeeded", tc.reason)
			if string(out.Result) != tc.result {
				t.Fatalf("result %s, want %s", out.Result, tc.result)
			}
		})
	}
}

func TestRunsInItsOwnSession(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Second)
	ready, release := fifo(t, "ready"), fifo(t, "release")
	g := grant(t, "sess", 1, api.Spec{Run: "echo up > " + q(ready) + "; read x < " + q(release)})
	r := start(t, e, g)
	readFIFO(t, ready)

	pid := pidOf(t, e, g)
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		t.Fatal(err)
	}
	if pgid != pid || pgid == syscall.Getpgrp() {
		t.Fatalf("job group %d (pid %d), test group %d: want a group of its own", pgid, pid, syscall.Getpgrp())
	}
	if sid := getsid(pid); sid != pid || sid == getsid(0) {
		t.Fatalf("job session %d (pid %d), test session %d: want a session of its own", sid, pid, getsid(0))
	}
	_, _, sid, err := procStat(pid)
	if err != nil || sid != pid {
		t.Fatalf("procStat session %d, %v; want %d", sid, err, pid)
	}
	writeFIFO(t, release, "go\n")
	wantOutcome(t, await(t, r), "succeeded", "")
}

func TestCancelOfJobThatExitsOnTerm(t *testing.T) {
	t.Parallel()
	// A grace far longer than the test: the job must end on SIGTERM alone.
	e, logs := newExecutor(t, t.TempDir(), time.Minute)
	ready := fifo(t, "ready")
	g := grant(t, "c1", 1, api.Spec{Run: "trap 'echo terminated; exit 5' TERM; echo up > " + q(ready) + "; sleep 60 & wait"})
	r := start(t, e, g)
	readFIFO(t, ready)

	began := time.Now()
	r.Stop(false)
	r.Stop(false) // idempotent
	out := await(t, r)
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("cancel took %v", d)
	}
	// The supervisor did not stand in the way, and still recorded the status.
	wantOutcome(t, out, "cancelled", "cancelled by the worker; exit status 5")
	if got := readState(t, e, g, "exit"); got != "5\n" {
		t.Fatalf("exit file %q, want 5", got)
	}
	if got := readState(t, e, g, "stdout"); got != "terminated\n" {
		t.Fatalf("the job's trap did not run once: stdout %q", got)
	}
	if got := readState(t, e, g, "stop"); got != "cancel\n" {
		t.Fatalf("stop file %q", got)
	}
	if !strings.Contains(logs.String(), `"local: stop"`) {
		t.Fatalf("no stop logged:\n%s", logs)
	}
}

// A cancel is one SIGTERM: the supervisor does not forward a second one. The
// job counts the TERMs it gets for 300ms after the first, and exits with the
// count. (A window, because the check is that nothing more comes.)
func TestCancelSendsOneTerm(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Minute)
	ready := fifo(t, "ready")
	g := grant(t, "once", 1, api.Spec{Run: "n=0; trap 'n=$((n+1))' TERM; echo up > " + q(ready) +
		`; while [ "$n" -eq 0 ]; do sleep 0.01; done; sleep 0.3; exit "$n"`})
	r := start(t, e, g)
	readFIFO(t, ready)
	r.Stop(false)
	wantOutcome(t, await(t, r), "cancelled", "cancelled by the worker; exit status 1")
}

func TestCancelOfJobThatIgnoresTerm(t *testing.T) {
	t.Parallel()
	const grace = 200 * time.Millisecond
	e, logs := newExecutor(t, t.TempDir(), grace)
	ready := fifo(t, "ready")
	g := grant(t, "c2", 1, api.Spec{Run: "trap '' TERM; echo up > " + q(ready) + "; exec sleep 60"})
	r := start(t, e, g)
	readFIFO(t, ready)

	began := time.Now()
	r.Stop(false)
	out := await(t, r)
	if d := time.Since(began); d < grace || d > 5*time.Second {
		t.Fatalf("the job ended %v after the cancel; want after the %v grace, soon", d, grace)
	}
	wantOutcome(t, out, "cancelled", "cancelled by the worker")
	if got := readState(t, e, g, supervise.LogFile); !strings.Contains(got, "stop grace of 200ms over") {
		t.Fatalf("no escalation logged by the supervisor:\n%s\nexecutor:\n%s", got, logs)
	}
}

func TestKill(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Minute)
	ready := fifo(t, "ready")
	g := grant(t, "k1", 1, api.Spec{Run: "echo up > " + q(ready) + "; exec sleep 60"})
	r := start(t, e, g)
	readFIFO(t, ready)
	r.Stop(true)
	r.Stop(false) // a cancel never weakens a kill
	out := await(t, r)
	wantOutcome(t, out, "killed", "killed by the worker")
	r.Stop(true) // stopping an ended run does nothing
	if !sameOutcome(r.Outcome(), out) {
		t.Fatal("outcome changed")
	}
}

func TestKillStrengthensCancel(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Minute)
	ready := fifo(t, "ready")
	g := grant(t, "k2", 1, api.Spec{Run: "trap '' TERM; echo up > " + q(ready) + "; exec sleep 60"})
	r := start(t, e, g)
	readFIFO(t, ready)
	r.Stop(false)
	r.Stop(true)
	wantOutcome(t, await(t, r), "killed", "killed by the worker")
	if got := readState(t, e, g, "stop"); got != "kill\n" {
		t.Fatalf("stop file %q", got)
	}
}

func TestStopAfterTheJobEnded(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Minute)
	g := grant(t, "late", 1, api.Spec{Run: "exit 0"})
	r := start(t, e, g)
	out := await(t, r)
	r.Stop(false)
	r.Stop(true)
	if !sameOutcome(r.Outcome(), out) || out.Outcome != "succeeded" {
		t.Fatalf("outcome %+v after a late stop", r.Outcome())
	}
	if _, err := os.Stat(filepath.Join(runDirOf(e, g), stateDir, stopFile)); !os.IsNotExist(err) {
		t.Fatalf("a late stop was recorded: %v", err)
	}
}

// A stop signal sent to the supervisor alone (`kill $(cat .leaselog/pid)`)
// reaches the command too, as TERM, and the supervisor records how it ended.
func TestSignalToWrapperAloneReachesCommand(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Minute)
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			ready := fifo(t, "ready")
			g := grant(t, "w", uint64(i+1), api.Spec{Run: "echo up > " + q(ready) + "; exec sleep 60"})
			r := start(t, e, g)
			readFIFO(t, ready)
			if err := syscall.Kill(pidOf(t, e, g), sig); err != nil {
				t.Fatal(err)
			}
			wantOutcome(t, await(t, r), "failed", "exit status "+strconv.Itoa(128+int(syscall.SIGTERM)))
		})
	}
}

// What the command leaves running in the background does not outlive it.
func TestLeftoversAreKilled(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Minute)
	g := grant(t, "bg", 1, api.Spec{Run: `sleep 60 & echo $! > child; exit 0`})
	out := await(t, start(t, e, g))
	wantOutcome(t, out, "succeeded", "")
	b, err := os.ReadFile(filepath.Join(runDirOf(e, g), "child"))
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// The supervisor killed and reaped the tree before it recorded the end.
	if processAlive(child) {
		t.Fatalf("background child %d outlived the job", child)
	}
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Second)
	notRepo := t.TempDir()
	for _, tc := range []struct {
		name string
		g    api.Grant
		want string
	}{
		{"malformed spec", api.Grant{Lease: 1, Job: api.Job{ID: "e", Spec: []byte(`{"run":`)}}, "bad spec"},
		{"no spec", api.Grant{Lease: 2, Job: api.Job{ID: "e"}}, "bad spec"},
		{"no run", grant(t, "e", 3, api.Spec{}), "no run command"},
		{"checkout without repo", grant(t, "e", 4, api.Spec{Run: "true", Checkout: &api.Checkout{}}), "without a repo"},
		{"bad job id", grant(t, "../x", 5, api.Spec{Run: "true"}), `'/' at byte 2 is not in [A-Za-z0-9._:@-]`},
		{"job id not ASCII", grant(t, "日本", 8, api.Spec{Run: "true"}), `'日' at byte 0 is not in`},
		{"job id not UTF-8", grant(t, "j\xe6", 9, api.Spec{Run: "true"}), `byte 0xe6 at 1 (not UTF-8) is not in`},
		{"empty job id", grant(t, "", 6, api.Spec{Run: "true"}), "job id is empty"},
		{"not a repository", grant(t, "e", 7, api.Spec{Run: "true", Checkout: &api.Checkout{Repo: notRepo}}), "checkout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Start(context.Background(), tc.g)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "local: start lease ") {
				t.Fatalf("error %v, want one about %q", err, tc.want)
			}
		})
	}

	t.Run("same lease twice", func(t *testing.T) {
		g := grant(t, "twice", 1, api.Spec{Run: "exit 0"})
		await(t, start(t, e, g))
		if _, err := e.Start(context.Background(), g); err == nil || !strings.Contains(err.Error(), "already exists") {
			t.Fatalf("second start: %v", err)
		}
	})

	// A repository that commits a .leaselog (here a link to a directory of
	// the worker's user) does not get leaselog's files written there.
	t.Run("checkout with a .leaselog", func(t *testing.T) {
		repo, elsewhere := newRepo(t), t.TempDir()
		if err := os.Symlink(elsewhere, filepath.Join(repo, ".leaselog")); err != nil {
			t.Fatal(err)
		}
		gitT(t, repo, "add", ".leaselog")
		gitT(t, repo, "commit", "-q", "-m", "a state folder of its own")
		_, err := e.Start(context.Background(), grant(t, "own", 1, api.Spec{Run: "true", Checkout: &api.Checkout{Repo: repo}}))
		if err == nil || !strings.Contains(err.Error(), "the checkout has a .leaselog of its own") {
			t.Fatalf("Start: %v, want a refusal of the checkout's .leaselog", err)
		}
		if ents, err := os.ReadDir(elsewhere); err != nil || len(ents) != 0 {
			t.Fatalf("written through the checkout's .leaselog: %v, %v", ents, err)
		}
	})

	t.Run("cancelled context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := e.Start(ctx, grant(t, "ctx", 1, api.Spec{Run: "true"})); err == nil {
			t.Fatal("started with a cancelled context")
		}
	})
}

func TestNew(t *testing.T) {
	t.Parallel()
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without a Dir")
	}
	dir := filepath.Join(t.TempDir(), "a", "b")
	e, err := New(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("Dir not created: %v", err)
	}
	if e.grace != 10*time.Second || e.poll != 500*time.Millisecond {
		t.Fatalf("defaults: grace %v, poll %v", e.grace, e.poll)
	}
}

// A job tells its progress in the file at $LEASELOG_PROGRESS: the run reads
// it (Progress) as a compact JSON object, or not at all — not an object, not
// JSON, past a heartbeat's 4 KiB of details, or not a file of its own, as
// for the result.
func TestProgress(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Second)
	for i, tc := range []struct {
		name, run string
		want      string
	}{
		{"an object", `printf '{ "step": 3, "of": [10] }' > "$LEASELOG_PROGRESS"`, `{"step":3,"of":[10]}`},
		{"none", `:`, ""},
		{"an array", `printf '[1,2]' > "$LEASELOG_PROGRESS"`, ""},
		{"half written", `printf '{"step": ' > "$LEASELOG_PROGRESS"`, ""},
		{"4 KiB", `printf '{"a":"%s"}' "$(head -c 4088 /dev/zero | tr '\0' x)" > "$LEASELOG_PROGRESS"`, `{"a":"` + strings.Repeat("x", 4088) + `"}`},
		{"past 4 KiB", `printf '{"a":"%s"}' "$(head -c 4089 /dev/zero | tr '\0' x)" > "$LEASELOG_PROGRESS"`, ""},
		{"a symbolic link", `printf '{"a":1}' > ../x.json; ln -s ../x.json "$LEASELOG_PROGRESS"`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := grant(t, "prog", uint64(i+1), api.Spec{Run: tc.run})
			r := start(t, e, g)
			wantOutcome(t, await(t, r), "succeeded", "")
			p, ok := r.(worker.Progresser)
			if !ok {
				t.Fatal("a local run tells no progress")
			}
			if got := p.Progress(); string(got) != tc.want {
				t.Fatalf("progress %.80s (%d bytes), want %.80s", got, len(got), tc.want)
			}
		})
	}
}
