package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/leaselog/leaselog/internal/testkit/synth"
)

// BenchmarkDaemonRSS starts the real daemon on a log of finished jobs (8
// events each, with a snapshot) and reads its resident set once it serves:
// the memory a daemon with that history costs. 1M jobs runs with
// LEASELOG_BENCH_LARGE=1 (the fixture takes minutes to build, once).
//
//	LEASELOG_BENCH_LARGE=1 go test -run '^$' -bench BenchmarkDaemonRSS -benchtime 1x ./cmd/leaselog
func BenchmarkDaemonRSS(b *testing.B) {
	jobs := []int{100_000}
	if os.Getenv("LEASELOG_BENCH_LARGE") != "" {
		jobs = append(jobs, 1_000_000)
	}
	for _, n := range jobs {
		dir, err := synth.Fixture(synth.Default, 8*n, true)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				rss := daemonRSS(b, dir)
				b.ReportMetric(float64(rss)/(1<<20), "rss-MB")
				b.ReportMetric(float64(rss)/float64(n), "rss-bytes/job")
			}
		})
	}
}

// daemonRSS starts serve on dir, waits for its "listening" line, reads its
// VmRSS, and stops it.
func daemonRSS(b *testing.B, dir string) int64 {
	cmd := exec.Command(binary, "serve", "--data", dir, "--listen", "127.0.0.1:0", "--local-capacity", "0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		if strings.Contains(lines.Text(), `"message":"listening"`) {
			go func() { _, _ = io.Copy(io.Discard, stderr) }()
			return vmRSS(b, cmd.Process.Pid)
		}
	}
	b.Fatalf("serve ended before listening: %v", lines.Err())
	return 0
}

func vmRSS(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc status")
	return 0
}
