package demo_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/leaselog/leaselog/demo"
)

// binary is the leaselog binary, built once: the demo's daemon is the real
// `leaselog serve`, in a process of its own.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leaselog-demo-test-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "leaselog")
	if out, err := exec.Command("go", "build", "-o", binary, "github.com/leaselog/leaselog/cmd/leaselog").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build leaselog: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestDemo plays the demo on the real daemon and holds its output to
// testdata/demo (go test ./demo -rewrite rewrites it). Two things differ
// from run to run and are masked: the demo's folder (DIR) and the time a
// restart took (gap=…).
func TestDemo(t *testing.T) {
	datadriven.RunTest(t, "testdata/demo", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "run":
			dir := t.TempDir()
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := demo.Run(ctx, demo.Options{Out: &out, Dir: dir, Keep: d.HasArg("keep"), Start: startServe}); err != nil {
				t.Fatalf("demo: %v\n%s\n--- daemon.log:\n%s", err, out.String(), readFile(filepath.Join(dir, "daemon.log")))
			}
			return mask(out.String(), dir)
		default:
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		}
	})
}

var gap = regexp.MustCompile(`gap=[0-9.]+[µnm]?s`)

// mask replaces what differs between runs.
func mask(out, dir string) string {
	return gap.ReplaceAllString(strings.ReplaceAll(out, dir, "DIR"), "gap=…")
}

func readFile(name string) string {
	b, err := os.ReadFile(name)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// serve is a `leaselog serve` the demo started.
type serve struct {
	cmd        *exec.Cmd
	url, token string
	logged     chan struct{} // closed once its log is copied whole
}

func (s *serve) URL() string   { return s.url }
func (s *serve) Token() string { return s.token }

// Stop is SIGTERM, the graceful stop, and the wait for the process.
func (s *serve) Stop() error {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	<-s.logged
	if err := s.cmd.Wait(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// startServe starts `leaselog serve` with the demo's configuration, its log
// going to c.Log, and returns once it listens.
func startServe(ctx context.Context, c demo.Config) (demo.Daemon, error) {
	conf := filepath.Join(filepath.Dir(c.Data), "leaselog.toml")
	text := fmt.Sprintf("[server]\nlisten = \"127.0.0.1:0\"\n[plugins.executor]\nrenew_seconds = %g\ngrace_seconds = %g\ntoleration_seconds = %g\nlocal_capacity = %d\n",
		c.Timing.Renew.Seconds(), c.Timing.Grace.Seconds(), c.Timing.Toleration.Seconds(), c.LocalCapacity)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, err
	}
	s := &serve{cmd: exec.CommandContext(ctx, binary, "serve", "--config", conf, "--data", c.Data), logged: make(chan struct{})}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	listening := make(chan string, 1)
	go func() {
		defer close(s.logged)
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			fmt.Fprintln(c.Log, lines.Text())
			var l struct{ Message, Addr string }
			if json.Unmarshal(lines.Bytes(), &l) == nil && l.Message == "listening" {
				listening <- l.Addr
			}
		}
		_, _ = io.Copy(c.Log, stderr)
	}()
	select {
	case addr := <-listening:
		s.url = "http://" + addr
	case <-s.logged:
		return nil, errors.Join(errors.New("serve ended before it listened"), s.cmd.Wait())
	}
	if c.LocalCapacity > 0 { // the admin token a daemon with a local worker and no [auth] makes
		b, err := os.ReadFile(filepath.Join(c.Data, "token"))
		if err != nil {
			return nil, errors.Join(err, s.Stop())
		}
		s.token = strings.TrimSpace(string(b))
	}
	return s, nil
}
