package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestE2EWorkerOverASession: `leaselog worker` takes its jobs, heartbeats
// them and reports them over a worker session by default, and over HTTP
// with --protocol http: the daemon's metrics count the calls by the route
// they came by.
func TestE2EWorkerOverASession(t *testing.T) {
	for _, tc := range []struct {
		name      string
		flags     []string
		want, not []string // in the metrics, and not
	}{
		{"default", nil,
			[]string{"\nleaselog_sessions 1\n", `route="SESSION heartbeat",status="200"`, `route="SESSION report",status="200"`},
			[]string{`route="POST /v1/workers/{worker}/heartbeat"`}},
		{"http", []string{"--protocol", "http"},
			[]string{"\nleaselog_sessions 0\n", `route="POST /v1/workers/{worker}/heartbeat",status="200"`},
			[]string{`route="SESSION heartbeat"`, `route="SESSION report"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := startServe(t, dir, 0)
			ev := d.follow(t, 0)
			wdir := filepath.Join(dir, "w1")
			t.Cleanup(func() { killRuns(wdir) })
			startProc(t, "worker w1", append([]string{"worker", "--server", d.url, "--id", "w1", "--workdir", wdir,
				"--capacity", "1", "--log-format", "json"}, tc.flags...)...)
			for _, id := range []string{"s-1", "s-2"} {
				submit(t, d.c, id, "evaluation", "sleep 0.3") // a few heartbeats at renew 0.1 s
				if r := ev.next("lease.reported", id); r.Outcome != "succeeded" || r.Worker != "w1" {
					t.Fatalf("report of %s: %+v, want succeeded by w1", id, r)
				}
			}
			resp, err := http.Get(d.url + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			m := string(b)
			for _, want := range tc.want {
				if !strings.Contains(m, want) {
					t.Errorf("metrics lack %q", want)
				}
			}
			for _, not := range tc.not {
				if strings.Contains(m, not) {
					t.Errorf("metrics have %q", not)
				}
			}
		})
	}
}
