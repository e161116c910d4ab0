package python

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The daemon's timing for the Python tests: short, so that a fenced worker
// and an expired lease take seconds (the worker fences 2.6 s after its last
// acknowledged heartbeat, the daemon expires at 3 s); long enough that a
// Python worker on a loaded machine keeps its leases.
const config = `
[server]
listen = "127.0.0.1:0"
[plugins.executor]
renew_seconds = 0.2
grace_seconds = 1.0
toleration_seconds = 3.0
local_capacity = 0
[log]
format = "json"
`

// The tokens of a second daemon, with an [auth] section: the tests of
// tokens (tests/test_auth.py) call it as an admin, an auditor, a worker and
// nobody.
const (
	adminToken   = "py-admin-token-000001"
	auditorToken = "py-auditor-token-0001"
	workerID     = "py-auth-worker"
	workerToken  = "py-worker-token-00001"
)

var authConfig = config + fmt.Sprintf(`
[auth]
admin = [%q]
auditor = [%q]
[auth.workers]
%s = %q
`, adminToken, auditorToken, workerID, workerToken)

func python(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		missing(t, "python3 is not installed: the Python client cannot be tested here")
	}
	return py
}

// missing skips a test that needs what this machine lacks, or fails it when
// LEASELOG_REQUIRE_PYTHON is set (CI, which installs Python: .ci/run).
func missing(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("LEASELOG_REQUIRE_PYTHON") != "" {
		t.Fatal(why + " (and LEASELOG_REQUIRE_PYTHON is set)")
	}
	t.Skip(why)
}

// TestPython runs the Python client's unittest tests against a real
// `leaselog serve` on a temporary directory and a free port.
func TestPython(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	bin := build(t, dir)
	cfg := filepath.Join(dir, "leaselog.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := serve(t, bin, "--config", cfg, "--data", filepath.Join(dir, "data"))
	authCfg := filepath.Join(dir, "auth.toml")
	if err := os.WriteFile(authCfg, []byte(authConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	authAddr := serve(t, bin, "--config", authCfg, "--data", filepath.Join(dir, "auth-data"))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	cmd.Env = append(environ("LEASELOG_SERVER", "LEASELOG_TOKEN", "LEASELOG_DATA", "PYTHONPATH"),
		"LEASELOG_SERVER=http://"+addr, "PYTHONDONTWRITEBYTECODE=1", "TMPDIR="+t.TempDir(), // the tests' state directories go with the test
		"LEASELOG_AUTH_SERVER=http://"+authAddr, "LEASELOG_AUTH_ADMIN="+adminToken,
		"LEASELOG_AUTH_AUDITOR="+auditorToken, "LEASELOG_AUTH_WORKER="+workerID+":"+workerToken)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("%s", out)
	}
	if strings.Contains(string(out), "skipped 'LEASELOG_") {
		t.Fatalf("the tests did not see the daemon:\n%s", out)
	}

	// The example executor, as the README runs it: it exits 0 only when
	// every session it submitted succeeded.
	for _, mode := range [][]string{nil, {"--command"}} {
		args := append([]string{filepath.Join("..", "..", "examples", "python", "executor.py"),
			"--runs", "2", "--steps", "2", "--step-seconds", "0.05", "--timeout", "60"}, mode...)
		ex := exec.CommandContext(ctx, py, args...)
		ex.Env = cmd.Env
		if out, err := ex.CombinedOutput(); err != nil {
			t.Fatalf("examples/python/executor.py %v: %v\n%s", mode, err, out)
		}
	}
}

// TestPipInstall installs the package the way its README says, with pip
// --no-build-isolation (Python's package index is not reachable), into a
// virtual environment that sees the system's setuptools, wheel and pip
// (--without-pip saves installing a second pip into it), and imports it
// from there. It takes the first Python that has them: python3 on the PATH
// (pyenv's has no wheel unless installed), then Debian's.
func TestPipInstall(t *testing.T) {
	python(t)
	dir := t.TempDir()
	var vpy, venv string
	var tried []string
	for i, py := range []string{"python3", "/usr/bin/python3"} {
		v := filepath.Join(dir, fmt.Sprintf("venv%d", i))
		out, err := exec.Command(py, "-m", "venv", "--system-site-packages", "--without-pip", v).CombinedOutput()
		if err == nil {
			p := filepath.Join(v, "bin", "python")
			if out, err = exec.Command(p, "-c", "import setuptools.build_meta, wheel, pip").CombinedOutput(); err == nil {
				vpy, venv = p, v
				break
			}
		}
		tried = append(tried, fmt.Sprintf("%s: %v: %s", py, err, lastLine(out)))
	}
	if vpy == "" {
		missing(t, "no Python here makes a virtual environment with setuptools, wheel and pip "+
			"(Debian: apt install python3-venv python3-pip python3-wheel):\n"+strings.Join(tried, "\n"))
	}
	// pip builds in the source tree: build from a copy, so that the
	// repository is left as it was.
	src := filepath.Join(dir, "src")
	if err := os.CopyFS(src, os.DirFS(".")); err != nil {
		t.Fatal(err)
	}
	install := exec.Command(vpy, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
		"--no-cache-dir", "--quiet", src)
	install.Env = environ("PIP_INDEX_URL", "PYTHONPATH")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("pip install --no-build-isolation: %v\n%s", err, out)
	}
	check := exec.Command(vpy, "-c", "import leaselog; print(leaselog.__file__); print(leaselog.Client, leaselog.Worker)")
	check.Dir = dir
	check.Env = environ("PYTHONPATH")
	out, err := check.CombinedOutput()
	if err != nil {
		t.Fatalf("import leaselog: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), venv) {
		t.Fatalf("leaselog imported from %s, want the virtual environment %s", out, venv)
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// build builds leaselog into dir and returns the binary's path.
func build(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "leaselog")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/leaselog/leaselog/cmd/leaselog").CombinedOutput(); err != nil {
		t.Fatalf("build leaselog: %v\n%s", err, out)
	}
	return bin
}

// serve starts `leaselog serve` with args and returns the address it
// listens on, read from its "listening" log line; the daemon is killed when
// the test ends.
func serve(t *testing.T, bin string, args ...string) string {
	t.Helper()
	return serveIn(t, "", bin, args...)
}

// serveIn is serve in the working directory cwd ("": the test's).
func serveIn(t *testing.T, cwd, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve"}, args...)...)
	cmd.Dir = cwd
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var log struct {
		sync.Mutex
		lines []string
	}
	logged := func() string {
		log.Lock()
		defer log.Unlock()
		return strings.Join(log.lines, "\n")
	}
	keep := func(line string) {
		log.Lock()
		log.lines = append(log.lines, line)
		log.Unlock()
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("serve's log:\n%s", logged())
		}
	})
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("serve exited before it listened:\n%s", logged())
			}
			keep(line)
			var l struct{ Message, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Message == "listening" && l.Addr != "" {
				go func() { // keep reading, or the daemon blocks on a full pipe
					for line := range lines {
						keep(line)
					}
				}()
				return l.Addr
			}
		case <-timeout:
			t.Fatalf("serve did not listen within 30s:\n%s", logged())
		}
	}
}

// environ is the test's environment without the named variables.
func environ(drop ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, d := range drop {
			keep = keep && name != d
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}
