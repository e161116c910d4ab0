package main

// Who may run commands: the admin token a daemon with a local worker keeps
// in its data folder, the CLI that finds it, tokens kept from jobs, and the
// unix socket's mode.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
)

// childEnv is the test's environment without anything of leaselog's, plus
// extra.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASELOG_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// listening waits for serve's "listening" line and returns the address
// clients use, or fails if serve exits first.
func listening(t *testing.T, p *proc) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, line := range strings.Split(p.output(), "\n") {
			var l struct{ Message, Addr, Network string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Message == "listening" {
				if l.Network == "unix" {
					return "unix://" + l.Addr
				}
				return "http://" + l.Addr
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited: %v\n%s", p.name, p.err, p.output())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not start:\n%s", p.name, p.output())
		}
	}
}

// cli runs a client command to its end in cwd with env.
func cli(t *testing.T, cwd string, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir, cmd.Env = cwd, env
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

func writeConfig(t *testing.T, dir, text string) string {
	t.Helper()
	path := filepath.Join(dir, "leaselog.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	token, path, err := loadOrCreateToken(dir, tokenFileName)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || len(token) < 32 {
		t.Fatalf("token file mode %v, token %d characters", fi.Mode(), len(token))
	}
	if again, _, err := loadOrCreateToken(dir, tokenFileName); err != nil || again != token {
		t.Fatalf("second start: token %q, %v; want the first one kept", again, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".token-*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}

	// The CLI finds it for a daemon on this host, never for another host.
	t.Setenv("LEASELOG_TOKEN", "")
	os.Unsetenv("LEASELOG_TOKEN")
	for _, tc := range []struct{ server, want string }{
		{"http://127.0.0.1:7420", token},
		{"http://localhost:7420", token},
		{"http://[::1]:7420", token},
		{"unix:///run/leaselog.sock", token},
		{"http://leaselog.example.com:7420", ""},
		{"http://10.0.0.7:7420", ""},
	} {
		if got, err := clientToken(tc.server, dir); err != nil || got != tc.want {
			t.Errorf("clientToken(%s) = %q, %v; want %q", tc.server, got, err, tc.want)
		}
	}
	t.Setenv("LEASELOG_TOKEN", "from-the-environment-0123")
	if got, _ := clientToken("http://127.0.0.1:7420", dir); got != "from-the-environment-0123" {
		t.Errorf("with $LEASELOG_TOKEN: %q", got)
	}
	t.Setenv("LEASELOG_TOKEN", " ")
	if _, err := clientToken("http://127.0.0.1:7420", dir); err == nil {
		t.Error("a blank $LEASELOG_TOKEN was taken")
	}
	os.Unsetenv("LEASELOG_TOKEN")

	// A file others may read is refused, and left as it is.
	for _, tc := range []struct {
		name    string
		mode    fs.FileMode
		content string
	}{
		{"readable by others", 0o644, token},
		{"readable by the group", 0o640, token},
		{"blank", 0o600, "\n"},
		{"short", 0o600, "abc\n"},
	} {
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, tc.mode); err != nil {
			t.Fatal(err)
		}
		_, _, err := loadOrCreateToken(dir, tokenFileName)
		if !errors.Is(err, errTokenFile) {
			t.Errorf("%s: %v, want a token file error", tc.name, err)
		}
		if _, err := clientToken("http://127.0.0.1:7420", dir); !errors.Is(err, errTokenFile) {
			t.Errorf("%s: the CLI took it: %v", tc.name, err)
		}
		if b, _ := os.ReadFile(path); string(b) != tc.content {
			t.Errorf("%s: the file was changed to %q", tc.name, b)
		}
	}
}

// TestServeTokenNoSetup: `leaselog serve` with its defaults (a local worker,
// no [auth]) refuses calls without the token it keeps in ./leaselog-data/token,
// and the CLI run from the same folder needs nothing but the address. The
// token survives a restart. --open, or no local worker, serves open.
func TestServeTokenNoSetup(t *testing.T) {
	dir := t.TempDir()
	env := childEnv()
	cfg := writeConfig(t, dir, "[server]\nlisten = \"127.0.0.1:0\"\n[plugins.executor]\nlocal_capacity = 1\n")
	t.Cleanup(func() { killRuns(filepath.Join(dir, "leaselog-data", "work")) })
	tokenPath := filepath.Join(dir, "leaselog-data", "token")
	var token string
	for life := 1; life <= 2; life++ {
		p := startProcIn(t, fmt.Sprintf("serve, life %d", life), dir, env, "serve", "--config", cfg)
		url := listening(t, p)
		fi, err := os.Stat(tokenPath)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("token file mode %v, want 0600", fi.Mode().Perm())
		}
		b, err := os.ReadFile(tokenPath)
		if err != nil {
			t.Fatal(err)
		}
		if life == 1 {
			token = string(b)
		} else if string(b) != token {
			t.Fatal("the token changed across a restart")
		}

		open, _ := api.NewClient(url, "")
		_, _, err = open.Submit(context.Background(), api.Submit{ID: "intruder", Kind: "run", Spec: json.RawMessage(`{"run":"true"}`)})
		var apiErr *api.Error
		if !errors.As(err, &apiErr) || apiErr.Status != 401 {
			t.Fatalf("a submit with no token: %v, want 401", err)
		}

		cliEnv := append(env[:len(env):len(env)], "LEASELOG_SERVER="+url)
		id := fmt.Sprintf("job-%d", life)
		if out, code := cli(t, dir, cliEnv, "submit", "--id", id, "--kind", "run", "--", "true"); code != 0 {
			t.Fatalf("submit from the daemon's folder: exit %d\n%s", code, out)
		}
		// From elsewhere, $LEASELOG_DATA names the folder; without it the
		// CLI has no token and says where one is found.
		elsewhere := t.TempDir()
		if out, code := cli(t, elsewhere, append(cliEnv, "LEASELOG_DATA="+filepath.Join(dir, "leaselog-data")), "jobs", id); code != 0 || !strings.Contains(out, id) {
			t.Fatalf("jobs with LEASELOG_DATA: exit %d\n%s", code, out)
		}
		if out, code := cli(t, elsewhere, cliEnv, "jobs"); code == 0 || !strings.Contains(out, "LEASELOG_TOKEN") {
			t.Fatalf("jobs with no token: exit %d\n%s", code, out)
		}
		p.signal(syscall.SIGTERM)
		if code := p.wait(); code != 0 {
			t.Fatalf("serve exit %d", code)
		}
	}

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"--open", []string{"--open", "--local-capacity", "1"}},
		{"no local worker", []string{"--local-capacity", "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Cleanup(func() { killRuns(filepath.Join(dir, "data", "work")) })
			p := startProcIn(t, "serve", dir, env, append([]string{"serve", "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0"}, tc.args...)...)
			c, _ := api.NewClient(listening(t, p), "")
			if _, err := c.Jobs(context.Background(), "", ""); err != nil {
				t.Fatalf("open daemon refused a call without a token: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "data", "token")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("a token file with %s: %v", tc.name, err)
			}
		})
	}
	// open and [auth] contradict each other.
	bad := writeConfig(t, t.TempDir(), "[server]\nopen = true\n[auth]\nadmin = [\"admin-token-0123456789\"]\n")
	if out, code := cli(t, dir, env, "serve", "--config", bad); code == 0 || !strings.Contains(out, "server.open") {
		t.Fatalf("open with [auth]: exit %d\n%s", code, out)
	}
}

// TestJobNeverSeesToken: the token given to `leaselog worker` (in its
// environment or a file), and one left in serve's environment, is found by
// their jobs neither in their own environment nor in the environ and command
// line of the process running them.
func TestJobNeverSeesToken(t *testing.T) {
	const (
		adminTok  = "admin-token-for-the-test-0001"
		workerTok = "worker-token-for-the-test-0001"
		serveTok  = "serve-env-token-never-used-01"
	)
	env := childEnv()
	auth := "[auth]\nadmin = [\"" + adminTok + "\"]\n[auth.workers]\nw1 = \"" + workerTok + "\"\n"
	daemon := func(t *testing.T, capacity int, extraEnv ...string) (*proc, *api.Client, string) {
		dir := t.TempDir()
		cfg := writeConfig(t, dir, config(capacity)+auth)
		t.Cleanup(func() { killRuns(filepath.Join(dir, "data", "work")) })
		p := startProcIn(t, "serve", dir, append(env[:len(env):len(env)], extraEnv...), "serve", "--config", cfg, "--data", filepath.Join(dir, "data"))
		url := listening(t, p)
		c, err := api.NewClient(url, adminTok)
		if err != nil {
			t.Fatal(err)
		}
		return p, c, url
	}
	// look runs a job that looks for the tokens everywhere it could: its
	// environment, the initial environment and the command line of pid.
	look := func(t *testing.T, c *api.Client, pid int) {
		out := t.TempDir()
		run := fmt.Sprintf("env > %[1]s/env; cat /proc/%[2]d/environ > %[1]s/environ 2>&1; cat /proc/%[2]d/cmdline > %[1]s/cmdline 2>&1; true", out, pid)
		spec, _ := json.Marshal(api.Spec{Run: run})
		if _, _, err := c.Submit(context.Background(), api.Submit{ID: "looker", Kind: "run", Spec: spec}); err != nil {
			t.Fatal(err)
		}
		if j := awaitEnded(t, c, "looker"); j.Outcome != "succeeded" {
			t.Fatalf("the job: %+v", j)
		}
		for _, name := range []string{"env", "environ", "cmdline"} {
			b, err := os.ReadFile(filepath.Join(out, name))
			if err != nil {
				t.Fatal(err)
			}
			for _, tok := range []string{workerTok, serveTok, adminTok} {
				if strings.Contains(string(b), tok) {
					t.Errorf("the job found a token in %s", name)
				}
			}
			// Root reads every process's environ: there the check must
			// have read something to mean anything.
			if name == "environ" && os.Geteuid() == 0 && !strings.Contains(string(b), "PATH=") {
				t.Errorf("environ holds no environment: %q", b)
			}
		}
	}

	t.Run("serve", func(t *testing.T) {
		p, c, _ := daemon(t, 1, "LEASELOG_TOKEN="+serveTok)
		look(t, c, p.cmd.Process.Pid)
	})
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"worker LEASELOG_TOKEN", []string{"LEASELOG_TOKEN=" + workerTok}, nil},
		{"worker --token-file", nil, []string{"--token-file", "TOKENFILE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c, url := daemon(t, 0)
			dir := t.TempDir()
			tokenFile := filepath.Join(dir, "w1.token")
			if err := os.WriteFile(tokenFile, []byte(workerTok+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"worker", "--server", url, "--id", "w1", "--workdir", filepath.Join(dir, "work"), "--capacity", "1", "--log-format", "json"}
			for _, a := range tc.args {
				args = append(args, strings.ReplaceAll(a, "TOKENFILE", tokenFile))
			}
			t.Cleanup(func() { killRuns(filepath.Join(dir, "work")) })
			w := startProcIn(t, "worker", dir, append(env[:len(env):len(env)], tc.env...), args...)
			look(t, c, w.cmd.Process.Pid) // the job ran: the worker had its token
		})
	}
}

// awaitEnded polls a job until it has ended.
func awaitEnded(t *testing.T, c *api.Client, id string) api.Job {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, err := c.Job(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Outcome != "" {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s did not end: %+v", id, j)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

// TestUnixSocket: the socket is 0600 from the start (no file of another mode
// ever appears at its path), clients reach it, nothing is left beside it, it
// replaces a dead daemon's socket, and goes with the daemon.
func TestUnixSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "leaselog.sock")
	// A dead daemon's socket: bound, never unlinked.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}

	env := childEnv()
	p := startProcIn(t, "serve", dir, env, "serve", "--data", filepath.Join(dir, "data"), "--listen", "unix://"+sock, "--local-capacity", "1")
	t.Cleanup(func() { killRuns(filepath.Join(dir, "data", "work")) })
	url := listening(t, p)
	if url != "unix://"+sock {
		t.Fatalf("listening on %s, want unix://%s", url, sock)
	}
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v, want a socket 0600", fi.Mode())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".leaselog-*")); len(left) > 0 {
		t.Fatalf("left beside the socket: %v", left)
	}
	// The CLI of this user reaches it, with the token of the data folder.
	if out, code := cli(t, dir, append(env, "LEASELOG_SERVER="+url, "LEASELOG_DATA="+filepath.Join(dir, "data")),
		"submit", "--id", "s1", "--kind", "run", "--", "true"); code != 0 {
		t.Fatalf("submit over the socket: exit %d\n%s", code, out)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Fatalf("serve exit %d", code)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket left after the stop: %v", err)
	}
}

// TestUnixSocketPathNotSocket: a path that holds anything but a socket is
// refused with a message and a non-zero exit, and left as it was; the store
// is not even created.
func TestUnixSocketPathNotSocket(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(path string) error
	}{
		{"regular file", func(p string) error { return os.WriteFile(p, []byte("precious"), 0o644) }},
		{"directory", func(p string) error { return os.Mkdir(p, 0o755) }},
		{"symbolic link", func(p string) error { return os.Symlink("/etc/hostname", p) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "in-the-way")
			if err := tc.make(path); err != nil {
				t.Fatal(err)
			}
			before, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			out, code := cli(t, dir, childEnv(), "serve", "--data", filepath.Join(dir, "data"), "--listen", "unix://"+path, "--local-capacity", "0")
			if code == 0 || !strings.Contains(out, "exists and is not a socket") {
				t.Fatalf("exit %d\n%s", code, out)
			}
			after, err := os.Lstat(path)
			if err != nil || !os.SameFile(before, after) || after.ModTime() != before.ModTime() || after.Mode() != before.Mode() {
				t.Fatalf("%s changed: %v", path, err)
			}
			if b, err := os.ReadFile(path); tc.name == "regular file" && (err != nil || string(b) != "precious") {
				t.Fatalf("content now %q, %v", b, err)
			}
			if _, err := os.Lstat(filepath.Join(dir, "data")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the store was created: %v", err)
			}
		})
	}
}

// TestConfigTokenMode: which configurations make the daemon keep an admin
// token, and which are refused.
func TestConfigTokenMode(t *testing.T) {
	for _, tc := range []struct {
		text      string
		generates bool
		err       string
	}{
		{"[plugins.executor]\nlocal_capacity = 2", true, ""},
		{"[plugins.executor]\nlocal_capacity = 0", false, ""},
		{"[server]\nopen = true\n[plugins.executor]\nlocal_capacity = 2", false, ""},
		{"[plugins.executor]\nlocal_capacity = 2\n[auth]\nadmin = [\"admin-token-0123456789\"]", false, ""},
		{"[server]\nlisten = \"unix:///tmp/x.sock\"\n[plugins.executor]\nlocal_capacity = 1", true, ""},
		{"[server]\nopen = true\n[auth]\nadmin = [\"admin-token-0123456789\"]", false, "server.open"},
		{"[server]\nopen = true\nlisten = \"0.0.0.0:7420\"", false, "server.listen"},
		{"[server]\nmax_connections = -1", false, "server.max_connections"},
	} {
		c, err := ParseConfig(tc.text)
		if err == nil {
			err = c.Validate()
		}
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: %v, want an error naming %s", tc.text, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.text, err)
		case tc.err == "" && c.GeneratesToken() != tc.generates:
			t.Errorf("%q: generates a token %v, want %v", tc.text, c.GeneratesToken(), tc.generates)
		}
	}
}

// TestWorkerTokenRefused: a worker token that cannot be right is refused
// before the worker does anything, with a message and a non-zero exit.
func TestWorkerTokenRefused(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open.token")
	if err := os.WriteFile(open, []byte("worker-token-0123456789\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(dir, "private.token")
	if err := os.WriteFile(private, []byte("worker-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"blank LEASELOG_TOKEN", []string{"LEASELOG_TOKEN= "}, nil, "blank"},
		{"token file others may read", nil, []string{"--token-file", open}, "lets other users read it"},
		{"missing token file", nil, []string{"--token-file", filepath.Join(dir, "none")}, "no such file"},
		{"both", []string{"LEASELOG_TOKEN=worker-token-0123456789"}, []string{"--token-file", private}, "keep one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"worker", "--server", "http://127.0.0.1:1", "--id", "w1", "--workdir", filepath.Join(dir, "work")}, tc.args...)
			out, code := cli(t, dir, childEnv(tc.env...), args...)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want a message saying %q:\n%s", code, tc.want, out)
			}
		})
	}
}
