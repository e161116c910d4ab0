package main

// The daemon of the bench's scale modes (--mode density, --mode million): a
// `leaselog serve` of its own, a child process of this binary on a data
// directory of its own, so that the bench reads the daemon's metrics from
// its start, measures its store on disk (compacted offline between runs of
// the daemon), and can SIGKILL and restart it.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/eventlog"
)

// benchReadyTimeout bounds a start of the scale daemon, its store opened
// and replayed: a million jobs take seconds, not minutes.
const benchReadyTimeout = 2 * time.Minute

// scaleDaemon is the scale modes' daemon.
type scaleDaemon struct {
	exe    string // the leaselog binary
	dir    string // its data directory (store.dir)
	config string // its configuration file
	logTo  string // its output, appended across restarts
	url    string
	opts   []api.ClientOption
	client *api.Client
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// newScaleDaemon writes the configuration of a daemon with no local worker
// and no [auth] (an open API), listening on a free port of 127.0.0.1, with
// renew at renew and grace and toleration in the defaults' proportion to
// it (5× and 30×), logging at info (its start-up's phases) to DIR.log, and
// returns it, not started.
func newScaleDaemon(exe, dir string, renew time.Duration, opts []api.ClientOption) (*scaleDaemon, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port for the daemon: %w", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("the daemon's data directory: %w", err)
	}
	r := renew.Seconds()
	text := fmt.Sprintf(`[server]
listen = %q
[plugins.executor]
local_capacity = 0
renew_seconds = %g
grace_seconds = %g
toleration_seconds = %g
[log]
level = "info"
`, addr, r, 5*r, 30*r)
	d := &scaleDaemon{exe: exe, dir: dir, config: dir + ".toml", logTo: dir + ".log", url: "http://" + addr, opts: opts}
	if err := os.WriteFile(d.config, []byte(text), 0o600); err != nil {
		return nil, fmt.Errorf("the daemon's configuration: %w", err)
	}
	if d.client, err = api.NewClient(d.url, "", opts...); err != nil {
		return nil, err
	}
	return d, nil
}

// readyAfterKill SIGKILLs the daemon and starts it again: the time from
// the restart to its first answer of /healthz, in milliseconds.
func (d *scaleDaemon) readyAfterKill(ctx context.Context) (float64, error) {
	if err := d.kill(); err != nil {
		return 0, err
	}
	ready, err := d.start(ctx)
	if err != nil {
		return 0, err
	}
	return float64(ready.Microseconds()) / 1000, nil
}

// start starts the daemon and waits until it answers /healthz; it returns
// the time from the process's start to that answer.
func (d *scaleDaemon) start(ctx context.Context) (time.Duration, error) {
	out, err := os.OpenFile(d.logTo, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("the daemon's output: %w", err)
	}
	defer out.Close()
	cmd := exec.Command(d.exe, "serve", "--config", d.config, "--data", d.dir)
	cmd.Stdout, cmd.Stderr = out, out
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s serve: %w", d.exe, err)
	}
	d.cmd, d.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(d.exited) }()
	deadline := time.Now().Add(benchReadyTimeout)
	probe := &http.Client{Timeout: time.Second}
	for {
		resp, err := probe.Get(d.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(t0), nil
			}
		}
		select {
		case <-d.exited:
			return 0, fmt.Errorf("the daemon exited during its start (%v): see %s", cmd.ProcessState, d.logTo)
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the daemon did not answer /healthz within %v: see %s", benchReadyTimeout, d.logTo)
		}
	}
}

// kill SIGKILLs the daemon and waits for it to exit.
func (d *scaleDaemon) kill() error {
	if d.cmd == nil {
		return nil
	}
	err := d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
	d.cmd = nil
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGKILL the daemon: %w", err)
	}
	return nil
}

// stop stops the daemon gracefully (SIGTERM), or kills it after a minute.
func (d *scaleDaemon) stop() error {
	if d.cmd == nil {
		return nil
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGTERM the daemon: %w", err)
	}
	select {
	case <-d.exited:
		d.cmd = nil
		return nil
	case <-time.After(time.Minute):
		return errors.Join(errors.New("the daemon did not stop within a minute of SIGTERM"), d.kill())
	}
}

// daemonMetrics is what the scale modes read of the daemon's /metrics.
type daemonMetrics struct {
	CPUSeconds float64 // process_cpu_seconds_total
	RSS        float64 // process_resident_memory_bytes
}

// metrics reads the daemon's process metrics from its /metrics.
func (d *scaleDaemon) metrics(ctx context.Context) (daemonMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url+"/metrics", nil)
	if err != nil {
		return daemonMetrics{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return daemonMetrics{}, fmt.Errorf("the daemon's /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return daemonMetrics{}, fmt.Errorf("the daemon's /metrics: status %d", resp.StatusCode)
	}
	return parseProcessMetrics(bufio.NewScanner(resp.Body))
}

// parseProcessMetrics reads the process collector's CPU and RSS from a
// Prometheus text exposition.
func parseProcessMetrics(sc *bufio.Scanner) (daemonMetrics, error) {
	var m daemonMetrics
	var cpu, rss bool
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "process_cpu_seconds_total":
			dst, cpu = &m.CPUSeconds, true
		case "process_resident_memory_bytes":
			dst, rss = &m.RSS, true
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return m, fmt.Errorf("the daemon's /metrics: %s %q: %w", name, value, err)
		}
		*dst = v
	}
	if err := sc.Err(); err != nil {
		return m, fmt.Errorf("the daemon's /metrics: %w", err)
	}
	if !cpu || !rss {
		return m, errors.New("the daemon's /metrics has no process_cpu_seconds_total or process_resident_memory_bytes")
	}
	return m, nil
}

// compactedSize opens the store of the stopped daemon, has Pebble compact
// it whole, and returns the bytes of its tables then: its data, without the
// write-ahead logs Pebble preallocates and keeps for reuse.
func (d *scaleDaemon) compactedSize(ctx context.Context) (int64, error) {
	if d.cmd != nil {
		return 0, errors.New("the daemon's store is compacted with the daemon stopped")
	}
	l, err := eventlog.Open(d.dir, eventlog.Options{})
	if err != nil {
		return 0, fmt.Errorf("open the daemon's store %s: %w", d.dir, err)
	}
	err = l.CompactStorage(ctx)
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return tableBytes(d.dir)
}

// tableBytes sums the sizes of Pebble's tables (*.sst) under dir.
func tableBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() && strings.HasSuffix(path, ".sst") {
			info, err := e.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("the size of %s: %w", dir, err)
	}
	return n, nil
}

// sampleRSS reads the daemon's RSS every interval until stop is closed and
// returns the largest it saw; a failed read is skipped (the daemon may be
// busy), and the first is an error only if no read succeeded.
func (d *scaleDaemon) sampleRSS(ctx context.Context, interval time.Duration, stop <-chan struct{}) func() (float64, error) {
	done := make(chan struct{})
	var peak float64
	var firstErr error
	ok := false
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			m, err := d.metrics(ctx)
			if err == nil {
				peak, ok = max(peak, m.RSS), true
			} else if firstErr == nil {
				firstErr = err
			}
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() (float64, error) {
		<-done
		if !ok {
			return 0, firstErr
		}
		return peak, nil
	}
}
