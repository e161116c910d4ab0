package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/workload"
)

// TestBenchDensity runs --mode density at a tiny size on a daemon of its
// own and checks what it counted: every lease heartbeated once a renew for
// the duration, none lost, and the daemon's figures read.
func TestBenchDensity(t *testing.T) {
	store := filepath.Join(t.TempDir(), "data")
	out, err := run(t, "bench", "--mode", "density", "--workers", "3", "--leases", "4", "--renew", "200ms", "--duration", "1s",
		"--daemon-binary", binary, "--store", store, "-o", "json")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	var r workload.DensityResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	// Each worker's first call is at w/3 of a renew, then one a renew while
	// before the end: 5 calls in 1 s, 4 leases each.
	if r.Mode != modeDensity || r.LiveLeases != 12 || r.Heartbeat.Count != 15 || r.LeaseHeartbeats != 60 {
		t.Errorf("live leases %d, calls %d, lease-heartbeats %d; want 12, 15, 60\n%s", r.LiveLeases, r.Heartbeat.Count, r.LeaseHeartbeats, out)
	}
	if r.Expired != 0 || r.NotContinued != 0 {
		t.Errorf("%d expired, %d not continued; want none\n%s", r.Expired, r.NotContinued, out)
	}
	if r.CPUMicrosPerLeaseHeartbeat <= 0 || r.RSSPeakBytes <= 0 || r.RSSEndBytes <= 0 || r.RSSPeakBytes < r.RSSEndBytes || r.ReadyMillis <= 0 {
		t.Errorf("the daemon's figures are not read: %s", out)
	}
	if r.StoreBytesBefore <= 0 || r.StoreBytesAfter <= r.StoreBytesBefore || r.DiskBytesPerLeaseHeartbeat <= 0 {
		t.Errorf("the store's growth is not measured: %s", out)
	}
	if entries, err := os.ReadDir(store); err != nil || len(entries) == 0 {
		t.Errorf("--store %s is not kept after the run: %v", store, err)
	}
}

// TestBenchMillion runs --mode million at a tiny size and checks that every
// measure was taken.
func TestBenchMillion(t *testing.T) {
	out, err := run(t, "bench", "--mode", "million", "--jobs", "2500", "--daemon-binary", binary, "-o", "json")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	var r workload.MillionResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if r.Mode != modeMillion || r.Jobs != 2500 || r.JobsPerSecond <= 0 {
		t.Errorf("mode %q, jobs %d, %f jobs/s\n%s", r.Mode, r.Jobs, r.JobsPerSecond, out)
	}
	for name, l := range map[string]workload.Latency{"page_queued": r.PageQueued, "page_all": r.PageAll} {
		if l.Count != workload.MillionPages || l.P50 <= 0 {
			t.Errorf("%s: %+v, want %d samples", name, l, workload.MillionPages)
		}
	}
	for name, l := range map[string]workload.Latency{"acquire_1000": r.AcquireSmall, "acquire_n": r.AcquireMillion, "acquire_restart": r.AcquireRestart} {
		if l.Count != workload.MillionAcquires || l.P50 <= 0 {
			t.Errorf("%s: %+v, want %d samples", name, l, workload.MillionAcquires)
		}
	}
	if r.ReadyMillis <= 0 || r.RSSStartBytes <= 0 || r.RSSPeakBytes < r.RSSAfterBytes || r.RSSRestartBytes <= 0 {
		t.Errorf("the daemon's figures are not read: %s", out)
	}
}

// TestBenchScaleRefusals: the scale modes refuse, before starting anything,
// what they cannot run.
func TestBenchScaleRefusals(t *testing.T) {
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "density", "--server", "http://127.0.0.1:1"}, "--server is for --mode lifecycle"},
		{[]string{"--mode", "density", "--leases", "0"}, "--leases 0"},
		{[]string{"--mode", "density", "--renew", "1s", "--duration", "500ms"}, "--duration 500ms"},
		{[]string{"--mode", "million", "--store", full}, "holds files already"},
		{[]string{"--mode", "millions"}, `--mode "millions"`},
	} {
		out, err := run(t, append([]string{"bench", "--daemon-binary", binary}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("bench %v: %v, want an error saying %q\n%s", c.args, err, c.want, out)
		}
	}
}

func TestParseProcessMetrics(t *testing.T) {
	for _, c := range []struct {
		text string
		want daemonMetrics
		err  string
	}{
		{"# HELP x\nprocess_cpu_seconds_total 1.5\nprocess_resident_memory_bytes 2.5e+07\ngo_goroutines 9\n", daemonMetrics{1.5, 2.5e7}, ""},
		{"process_cpu_seconds_total 1.5\n", daemonMetrics{}, "has no process_cpu_seconds_total or process_resident_memory_bytes"},
		{"process_cpu_seconds_total x\nprocess_resident_memory_bytes 1\n", daemonMetrics{}, `process_cpu_seconds_total "x"`},
	} {
		got, err := parseProcessMetrics(bufio.NewScanner(strings.NewReader(c.text)))
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %v, want an error saying %q", c.text, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%q: %+v, %v; want %+v", c.text, got, err, c.want)
		}
	}
}
