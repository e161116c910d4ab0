package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaselog/leaselog/internal/testkit/testutil"
)

// JSON log lines carry their time to the millisecond.
func TestJSONLogTimeInMilliseconds(t *testing.T) {
	var buf bytes.Buffer
	l0 := newLogger(LogConfig{Format: "json", Level: "info"}, &buf)
	l0.Info().Msg("x")
	var l struct{ Time string }
	if err := json.Unmarshal(buf.Bytes(), &l); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)$`).MatchString(l.Time) {
		t.Fatalf("time %q is not RFC 3339 to the millisecond", l.Time)
	}
}

// openPty returns the two ends of a new pseudo-terminal.
func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal on this machine: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// Console lines are coloured on a terminal only: a buffer, a file or a
// pipe gets no escape codes.
func TestConsoleLogColourOnlyOnATerminal(t *testing.T) {
	const esc = "\x1b["
	var buf bytes.Buffer
	plain := newLogger(LogConfig{Format: "console", Level: "info"}, &buf)
	plain.Warn().Str("k", "v").Msg("plain")
	if strings.Contains(buf.String(), esc) || !strings.Contains(buf.String(), "plain") {
		t.Errorf("console line to a buffer: %q", buf.String())
	}
	f, err := os.Create(t.TempDir() + "/log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("a file taken for a terminal")
	}

	master, slave := openPty(t)
	if !isTerminal(slave) {
		t.Fatal("a pseudo-terminal not taken for a terminal")
	}
	coloured := newLogger(LogConfig{Format: "console", Level: "info"}, slave)
	coloured.Warn().Msg("coloured")
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 4096)
		n, _ := master.Read(b)
		got <- string(b[:n])
	}()
	select {
	case s := <-got:
		if !strings.Contains(s, esc) || !strings.Contains(s, "coloured") {
			t.Errorf("console line on a terminal: %q, want colour codes", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing read from the terminal")
	}
}

// leaselog worker takes --log-level and --log-format, refusing unknown
// values, and warns of a daemon it cannot reach, saying what to check and
// when it tries again.
func TestWorkerLogFlags(t *testing.T) {
	t.Setenv("LEASELOG_TOKEN", "") // restored after the test
	os.Unsetenv("LEASELOG_TOKEN")  // no token: the daemon is open
	for _, tc := range []struct{ args, want string }{
		{"--log-level bogus", `--log-level: unknown level "bogus"`},
		{"--log-format xml", `--log-format "xml": want json or console`},
		{"--retention -1s", "--retention -1s: want 0"},
	} {
		var out bytes.Buffer
		err := (&Main{Stdout: &out, Stderr: &out}).Run(context.Background(),
			append([]string{"worker", "--id", "w", "--workdir", t.TempDir()}, strings.Fields(tc.args)...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("worker %s: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}

	addr := closedPort(t)
	logs := &testutil.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&Main{Stdout: logs, Stderr: logs}).Run(ctx, []string{"worker", "--id", "w", "--server", addr,
			"--workdir", t.TempDir(), "--log-level", "warn", "--log-format", "json"})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "\n") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling a condition, with a bound
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(logs.String(), "\n")
	var l struct {
		Level, Message, Error string
		Retry                 float64 `json:"retry_in_seconds"`
	}
	if err := json.Unmarshal([]byte(first), &l); err != nil {
		t.Fatalf("first line %q: %v", first, err)
	}
	if l.Level != "warn" || l.Message != "daemon not reachable yet; retrying" || l.Retry <= 0 ||
		!strings.HasPrefix(l.Error, "cannot reach the daemon at http://"+addr+": connection refused") {
		t.Fatalf("first line at --log-level warn: %s", first)
	}
}

// serve takes --log-level over log.level, and refuses an unknown one.
func TestServeLogLevelFlag(t *testing.T) {
	var out bytes.Buffer
	err := (&Main{Stdout: &out, Stderr: &out}).Run(context.Background(), []string{"serve", "--open", "--local-capacity", "0",
		"--data", t.TempDir(), "--listen", "127.0.0.1:0", "--log-level", "loud"})
	if err == nil || !strings.Contains(err.Error(), `log.level: unknown level "loud"`) {
		t.Fatalf("serve --log-level loud: %v", err)
	}
}
