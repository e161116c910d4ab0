package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
)

// waitFor polls cond until it holds, failing the test after 30 s with what.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, cond)
}

// startServeUnix starts `leaselog serve` listening on the unix socket sock
// only, on dir's data, and returns once it answers there.
func startServeUnix(t *testing.T, dir, sock string) (*proc, *api.Client) {
	t.Helper()
	cfg := filepath.Join(dir, "leaselog.toml")
	text := strings.Replace(config(0), `listen = "127.0.0.1:0"`, fmt.Sprintf("listen = %q", "unix://"+sock), 1)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "serve", "serve", "--config", cfg, "--data", filepath.Join(dir, "data"))
	token, err := clientToken("unix://"+sock, filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := api.NewClient("unix://"+sock, token)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "serve to answer on "+sock, func() bool {
		select {
		case <-p.done:
			t.Fatalf("serve exited: %v\n%s", p.err, p.output())
		default:
		}
		_, err := c.Health(context.Background())
		return err == nil
	})
	return p, c
}

// jsonEvents are the events a `leaselog events -o json` printed, in order.
func jsonEvents(t *testing.T, out string) []api.Event {
	t.Helper()
	var evs []api.Event
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var e api.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if e.Seq != 0 { // a line of the daemon's log has none
			evs = append(evs, e)
		}
	}
	return evs
}

// What happens: `leaselog events --follow` runs over the daemon's unix
// socket, and the daemon is killed and started again. The follower says the
// stream was lost, connects again with backoff, resumes with Last-Event-ID,
// and in the end has shown every event of the log once, in order.
func TestE2EEventsFollowReconnects(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	d1, c1 := startServeUnix(t, dir, sock)
	submit(t, c1, "before", "run", "true")

	f := startProc(t, "events --follow", "events", "--follow", "-o", "json", "--server", "unix://"+sock, "--data", filepath.Join(dir, "data"))
	saw := func(job string) func() bool {
		return func() bool {
			return slices.ContainsFunc(jsonEvents(t, f.output()), func(e api.Event) bool { return e.Type == "lease.queued" && e.Job == job })
		}
	}
	waitFor(t, "the follower to show job before", saw("before"))

	d1.signal(syscall.SIGKILL)
	d1.wait()
	waitFor(t, "the follower to tell the stream was lost", func() bool { return strings.Contains(f.output(), "connecting again in") })

	_, c2 := startServeUnix(t, dir, sock)
	submit(t, c2, "after", "run", "true")
	waitFor(t, "the follower to show job after", saw("after"))
	waitFor(t, "the follower to tell the stream resumed", func() bool { return strings.Contains(f.output(), "events: stream resumed") })

	shown := jsonEvents(t, f.output())
	var log []api.Event
	for e, err := range c2.AllEvents(context.Background(), api.EventQuery{}) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Seq <= shown[len(shown)-1].Seq {
			log = append(log, e)
		}
	}
	seqs := func(es []api.Event) []uint64 {
		var out []uint64
		for _, e := range es {
			out = append(out, e.Seq)
		}
		return out
	}
	if !slices.Equal(seqs(shown), seqs(log)) {
		t.Fatalf("the follower showed seqs %v; the log has %v", seqs(shown), seqs(log))
	}
}
