package ui_test

// The harness of the browser tests: a headless Chromium, a daemon on a
// manual clock, and a tab on the dashboard with waits that poll.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/server"
)

// -ui.screenshots regenerates the README's pictures: docs/dashboard.png from
// the job page of TestDashboard, docs/dashboard-overview.png from the
// overview of TestDashboardOverview. Every page's screenshot is always saved
// in the test's artifact directory (go test -artifacts keeps it).
var screenshots = flag.Bool("ui.screenshots", false, "write docs/dashboard.png and docs/dashboard-overview.png from the browser tests")

// browserPaths are the names Chromium goes by (Debian's package installs
// chromium; others ship chromium-browser, google-chrome or headless-shell).
var browserPaths = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"}

// browser starts a headless Chromium for the test, or skips the test when
// there is none and LEASELOG_REQUIRE_BROWSER is unset (CI sets it: there a
// missing browser fails rather than skips).
func browser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range browserPaths {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("LEASELOG_REQUIRE_BROWSER") != "" {
			t.Fatalf("no Chromium found (looked for %s) and LEASELOG_REQUIRE_BROWSER is set: apt-get install chromium", strings.Join(browserPaths, ", "))
		}
		t.Skipf("no Chromium found (looked for %s): the dashboard's browser test needs one (apt-get install chromium)", strings.Join(browserPaths, ", "))
	}
	// Bounds a browser that hangs; a passing run takes seconds, but make
	// test runs every package at once on a busy machine.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	// Chromium refuses to run as root with its sandbox; elsewhere the
	// sandbox may be unusable (a container, or a host that forbids
	// unprivileged user namespaces): the pages are the test's own, so it
	// then runs without.
	bctx, err := startBrowser(ctx, t, path, os.Geteuid() == 0)
	if err != nil && os.Geteuid() != 0 {
		t.Logf("start %s with its sandbox: %v; again without", path, err)
		bctx, err = startBrowser(ctx, t, path, true)
	}
	if err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return bctx
}

func startBrowser(ctx context.Context, t *testing.T, path string, noSandbox bool) (context.Context, error) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1280, 860))
	if noSandbox {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	return bctx, chromedp.Do(bctx) // starts the browser
}

// daemon is a real API server (package server) on a real store, on a manual
// clock near now, so that the pages' countdowns read sensibly.
type daemon struct {
	t     *testing.T
	url   string
	svc   *lease.Service
	clock *clocktest.Clock
	token string
}

func newDaemon(t *testing.T, auth *server.Auth) *daemon {
	t.Helper()
	return newDaemonOutput(t, auth, nil)
}

// newDaemonOutput is newDaemon whose own worker's runs are out (GET
// /v1/jobs/{id}/output), with options of its store or service.
func newDaemonOutput(t *testing.T, auth *server.Auth, out server.OutputSource, more ...leasetest.Option) *daemon {
	t.Helper()
	// The daemon's clock is an hour behind the browser's: the pages must
	// count the time left on the daemon's, which they learn from the Date
	// of its answers (set from that clock, as a real daemon's wall clock
	// sets it).
	d := &daemon{t: t, clock: clocktest.New(time.Now().Add(-time.Hour))}
	_, d.svc = leasetest.Open(t, append([]leasetest.Option{leasetest.Clock(d.clock)}, more...)...)
	srv := server.New(d.svc, server.Options{Auth: auth, Registerer: prometheus.NewRegistry(), Clock: d.clock, Output: out})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", d.clock.Now().UTC().Format(http.TimeFormat))
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close() // ends the pages' event streams, so that the listener can close
		ts.Close()
	})
	d.url = ts.URL
	if auth != nil {
		d.token = auth.Admin[0]
	}
	return d
}

// call sends one API call and decodes its answer into out (if not nil),
// failing the test unless the status is want.
func (d *daemon) call(method, path string, body any, want int, out any) {
	d.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			d.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	rq, err := http.NewRequest(method, d.url+path, rd)
	if err != nil {
		d.t.Fatal(err)
	}
	if d.token != "" {
		rq.Header.Set("Authorization", "Bearer "+d.token)
	}
	rs, err := http.DefaultClient.Do(rq)
	if err != nil {
		d.t.Fatal(err)
	}
	defer rs.Body.Close()
	b, _ := io.ReadAll(rs.Body)
	if rs.StatusCode != want {
		d.t.Fatalf("%s %s: %d %s, want %d", method, path, rs.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			d.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}

type grants struct {
	Leases []struct {
		Lease uint64 `json:"lease"`
		Job   struct {
			ID string `json:"id"`
		} `json:"job"`
	} `json:"leases"`
}

// seed gives every page something to show: a job reported, one whose
// first lease expired (its worker's late report kept as a stale report)
// and that runs again on another worker, a run on that worker too.
func (d *daemon) seed() {
	d.t.Helper()
	for _, j := range []struct{ id, kind string }{{"eval-1", "evaluation"}, {"run-1", "run"}, {"run-2", "run"}} {
		d.call("POST", "/v1/jobs", map[string]any{"id": j.id, "kind": j.kind, "spec": map[string]string{"run": "make " + j.id}}, http.StatusCreated, nil)
	}
	var g grants
	d.call("POST", "/v1/workers/w1/acquire", map[string]any{"max": 2, "start": true}, http.StatusOK, &g)
	if len(g.Leases) != 2 || g.Leases[0].Job.ID != "eval-1" {
		d.t.Fatalf("w1 acquired %+v, want eval-1 and run-1", g)
	}
	evalLease, runLease := g.Leases[0].Lease, g.Leases[1].Lease
	for range 3 {
		d.clock.Advance(time.Second)
		d.call("POST", "/v1/workers/w1/heartbeat", map[string]any{"leases": []uint64{evalLease, runLease}}, http.StatusOK, nil)
	}
	d.call("POST", fmt.Sprintf("/v1/leases/%d/report", runLease), map[string]any{"worker": "w1", "outcome": "succeeded"}, http.StatusOK, nil)
	// w1 goes silent past toleration: eval-1's lease expires, and the job
	// is queued again. The sweeper ticks every second meanwhile, as the
	// daemon's does: a longer silence of its own would be the daemon's
	// absence, which expires nothing.
	for range int(leasetest.Timing().Toleration/time.Second) + 1 {
		d.clock.Advance(time.Second)
		if err := d.svc.Sweep(); err != nil {
			d.t.Fatal(err)
		}
	}
	d.call("POST", fmt.Sprintf("/v1/leases/%d/report", evalLease), map[string]any{"worker": "w1", "outcome": "succeeded", "ref": "refs/leaselog/eval-1/late"},
		http.StatusConflict, nil)
	d.call("POST", "/v1/workers/w2/acquire", map[string]any{"max": 2, "start": true}, http.StatusOK, &g)
	if len(g.Leases) != 2 {
		d.t.Fatalf("w2 acquired %+v, want run-2 and eval-1", g)
	}
	d.call("POST", "/v1/workers/w2/heartbeat", map[string]any{"leases": []uint64{g.Leases[0].Lease, g.Leases[1].Lease}}, http.StatusOK, nil)
}

// seedOutcomes gives the jobs page one job of every tone: reported
// succeeded, failed and killed, cancelled while queued, an evaluation
// capped at one requeue and lost twice (failed, "lost 2 times"), and one
// queued.
func (d *daemon) seedOutcomes() {
	d.t.Helper()
	run := func(id string, body map[string]any, outcomes ...string) {
		body["id"] = id
		d.call("POST", "/v1/jobs", body, http.StatusCreated, nil)
		for _, o := range outcomes {
			var g grants
			d.call("POST", "/v1/workers/w1/acquire", map[string]any{"max": 1, "start": true}, http.StatusOK, &g)
			if len(g.Leases) != 1 || g.Leases[0].Job.ID != id {
				d.t.Fatalf("w1 acquired %+v, want %s", g, id)
			}
			d.call("POST", fmt.Sprintf("/v1/leases/%d/report", g.Leases[0].Lease), map[string]any{"worker": "w1", "outcome": o}, http.StatusOK, nil)
		}
	}
	run("good", map[string]any{"kind": "run"}, "succeeded")
	run("bad", map[string]any{"kind": "run"}, "failed")
	run("killed", map[string]any{"kind": "run"}, "killed")
	run("poison", map[string]any{"kind": "evaluation", "max_requeues": 1}, "lost", "lost")
	run("stopped", map[string]any{"kind": "run"})
	d.call("POST", "/v1/jobs/stopped/cancel", nil, http.StatusOK, nil)
	run("waiting", map[string]any{"kind": "run"})
}

// output is the runs of one worker: what each (job, stream) wrote so far,
// whatever the lease.
type output struct {
	worker string
	mu     sync.Mutex
	text   map[string]string // job + "/" + stream
}

func (o *output) Worker() string { return o.worker }

func (o *output) Output(_ context.Context, job string, _ uint64, stream string, offset int64, max int) ([]byte, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b := []byte(o.text[job+"/"+stream])
	if offset >= int64(len(b)) {
		return nil, nil
	}
	return b[offset:min(int64(len(b)), offset+int64(max))], nil
}

func (o *output) write(job, stream, s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.text[job+"/"+stream] += s
}

// page is one browser tab on the dashboard.
type page struct {
	t   *testing.T
	ctx context.Context
}

func newPage(t *testing.T, browser context.Context) *page {
	ctx, cancel := chromedp.NewContext(browser) // a new tab: its own sessionStorage
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 860)); err != nil {
		t.Fatal(err)
	}
	return &page{t: t, ctx: ctx}
}

func (p *page) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, actions...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// click clicks the element that selector matches once it is on the page
// (for up to 20 s, as waitFor), found and clicked in one step of the page's
// own JavaScript, as a user's click lands on what the page shows at that
// moment. The live pages re-render as they update: a node found by one
// DevTools call may be gone by the next, and a click by node id then fails
// ("Could not find node with given id").
func (p *page) click(what, selector string) {
	p.t.Helper()
	js := fmt.Sprintf(`(() => { const el = document.querySelector(%q); if (!el) return false; el.click(); return true })()`, selector)
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		p.t.Fatalf("%s: nothing on the page matched %s: %v", what, selector, err)
	}
}

// waitFor polls the JavaScript condition cond until it holds, for up to 20 s
// (it returns as soon as it does; the bound is for a loaded machine):
// the pages load and update asynchronously, and a condition polled is the
// only honest wait for that.
func (p *page) waitFor(what, cond string) {
	p.t.Helper()
	_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil {
		text, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.getElementById('main').innerText`))
		p.t.Fatalf("%s: %v; the page shows:\n%s", what, err, text)
	}
}

func eval[T any](p *page, expr string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot saves the page as name.png in the test's artifact directory.
func (p *page) screenshot(name string) []byte {
	p.t.Helper()
	b, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(p.t.ArtifactDir(), name+".png"), b, 0o644); err != nil {
		p.t.Fatal(err)
	}
	return b
}

// go to a page of the dashboard without reloading it, as its links do.
func (p *page) open(hash string) {
	p.t.Helper()
	p.do("open "+hash, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = %q`, hash)))
}
