package server_test

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/internal/buildinfo"
	"github.com/leaselog/leaselog/server"
)

// TestMetricsStandard: /metrics has leaselog_build_info, and the Go runtime
// and process collectors, on a registry given bare (as the daemon's is).
func TestMetricsStandard(t *testing.T) {
	f := newFixture(t, server.Options{})
	r := f.do("GET", "/metrics", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("metrics: %s", r)
	}
	text := string(r.body)
	in := buildinfo.Get()
	build := fmt.Sprintf(`leaselog_build_info{goversion=%q,revision=%q,version=%q} 1`, runtime.Version(), in.RevisionLabel(), in.Version)
	for _, want := range []string{build, "go_goroutines ", "go_memstats_heap_alloc_bytes ", "process_cpu_seconds_total ", "process_open_fds "} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Twice on one registry: the standard collectors once, no panic.
	if n := strings.Count(text, "# TYPE go_goroutines "); n != 1 {
		t.Errorf("go_goroutines described %d times", n)
	}
}
