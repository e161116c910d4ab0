package main

import (
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/hostclock"
)

// TestWorkerFenceClock: `leaselog worker` asks the daemon's /healthz for its
// boot id, retrying until the daemon is there, and fences on CLOCK_MONOTONIC
// when it shares the daemon's boot, else on CLOCK_BOOTTIME.
func TestWorkerFenceClock(t *testing.T) {
	own, err := hostclock.BootID()
	if err != nil {
		t.Skipf("this host has no boot id (%v)", err)
	}
	for _, tc := range []struct {
		name, bootID, want string
	}{
		{"same host", own, "monotonic"},
		{"another host", "00000000-0000-4000-8000-000000000000", "boottime"},
		{"not announced", "", "boottime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A port nobody listens on yet: the worker starts first.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			dir := t.TempDir()
			t.Cleanup(func() { killRuns(filepath.Join(dir, "work")) })
			w := startProcIn(t, "worker", dir, childEnv(), "worker", "--server", "http://"+addr, "--id", "w1",
				"--workdir", filepath.Join(dir, "work"), "--capacity", "1", "--log-format", "json")
			waitLine(t, w, "daemon not reachable yet; retrying")

			// The daemon comes: here only its /healthz, announcing bootID.
			ln, err = net.Listen("tcp", addr)
			if err != nil {
				t.Skipf("the port was taken meanwhile: %v", err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/healthz" {
					rw.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				_ = json.NewEncoder(rw).Encode(api.Health{Status: "ok", BootID: tc.bootID})
			})}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { srv.Close() })

			waitLine(t, w, "worker running")
			var running struct {
				FenceClock string `json:"fence_clock"`
			}
			for _, line := range strings.Split(w.output(), "\n") {
				if strings.Contains(line, `"worker running"`) {
					if err := json.Unmarshal([]byte(line), &running); err != nil {
						t.Fatal(err)
					}
				}
			}
			if running.FenceClock != tc.want {
				t.Fatalf("fence clock %q, want %q", running.FenceClock, tc.want)
			}
			w.signal(syscall.SIGTERM)
			w.wait()
		})
	}
}

// TestServeAnnouncesBootID: serve's /healthz says its host's boot id.
func TestServeAnnouncesBootID(t *testing.T) {
	own, err := hostclock.BootID()
	if err != nil {
		t.Skipf("this host has no boot id (%v)", err)
	}
	d := startServe(t, t.TempDir(), 0)
	resp, err := http.Get(d.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h api.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	if h.BootID != own {
		t.Fatalf("healthz %+v, want boot id %s", h, own)
	}
	// The connection cap is on, and said.
	if !strings.Contains(d.output(), `"max_connections":`) {
		t.Fatalf("no max_connections in the listening line")
	}
}
