package ui_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/server"
)

// TestDashboard drives every page in a real Chromium against a real daemon:
// the jobs (filters, paging, a job appearing live), a job's timeline and
// output, the live leases, the workers, the stale-report ledger; and saves
// a screenshot of each.
func TestDashboard(t *testing.T) {
	b := browser(t)
	out := &output{worker: "w2", text: map[string]string{}}
	out.write("eval-1", "stdout", "hello from eval-1\n")
	out.write("eval-1", "stderr", "a warning\n")
	d := newDaemonOutput(t, nil, out)
	d.seed()
	p := newPage(t, b)

	// The jobs page, then a job submitted through the API appears on it
	// live: the page is not reloaded (a mark set on its window survives).
	p.do("load the dashboard", chromedp.Navigate(d.url+"/ui/#/jobs"))
	p.waitFor("the seeded jobs listed", `document.querySelectorAll('#jobs tr[data-job]').length === 3`)
	p.waitFor("the event stream connected", `document.getElementById('live').dataset.state === 'on'`)
	p.do("mark the window", chromedp.Evaluate[chromedp.Void](`window.sameDocument = true`))
	d.call("POST", "/v1/jobs", map[string]any{"id": "live-1", "kind": "run", "spec": map[string]string{"run": "true"}}, http.StatusCreated, nil)
	p.waitFor("the submitted job listed live", `document.querySelector('#jobs tr[data-job="live-1"]') !== null`)
	if !eval[bool](p, `window.sameDocument === true`) {
		t.Fatal("the jobs page was reloaded to show the new job; want it live")
	}
	if got := eval[string](p, `document.querySelector('#jobs tr[data-job="eval-1"]').innerText`); !strings.Contains(got, "running") || !strings.Contains(got, "w2") {
		t.Errorf("eval-1's row %q: want running on w2", got)
	}
	p.do("filter by state", chromedp.SetValue(chromedp.CSS(`select[name="state"]`), "reported"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('select[name="state"]').dispatchEvent(new Event('change'))`))
	p.waitFor("only the reported job listed", `document.querySelectorAll('#jobs tr[data-job]').length === 1 && document.querySelector('#jobs tr[data-job="run-1"]') !== null`)
	p.do("clear the filter", chromedp.Navigate(d.url+"/ui/#/jobs"))
	p.waitFor("every job listed", `document.querySelectorAll('#jobs tr[data-job]').length === 4`)
	p.screenshot("jobs")

	// A job's timeline: two leases as bands, the first expired and marked
	// with its stale report, heartbeats collapsed in the event list; a
	// heartbeat arrives live.
	p.open("#/job/eval-1")
	p.waitFor("two lease bands", `document.querySelectorAll('#timeline g.lease').length === 2`)
	p.waitFor("the expiry and the stale report marked", `document.querySelector('#timeline .mark.expired') !== null && document.querySelector('#timeline .mark.stale') !== null`)
	p.waitFor("the live band", `document.querySelector('#timeline rect.band.live') !== null && document.querySelector('#timeline rect.band.expired') !== null`)
	if got := eval[string](p, `document.getElementById('events').innerText`); !strings.Contains(got, "lease.heartbeat ×3") || !strings.Contains(got, "lease.stale_report") {
		t.Errorf("the event list %q: want 3 heartbeats on one line and the stale report", got)
	}
	p.waitFor("the job's output", `document.getElementById('output-stdout').textContent === 'hello from eval-1\n' && document.getElementById('output-stderr').textContent === 'a warning\n'`)
	out.write("eval-1", "stdout", "more\n")
	beats := eval[int](p, `document.querySelectorAll('#timeline line.beat').length`)
	var g grants
	d.call("GET", "/v1/workers/w2/leases", nil, http.StatusOK, &g)
	d.clock.Advance(time.Second)
	d.call("POST", "/v1/workers/w2/heartbeat", map[string]any{"leases": []uint64{g.Leases[0].Lease, g.Leases[1].Lease}}, http.StatusOK, nil)
	p.waitFor("the new heartbeat on the timeline", fmt.Sprintf(`document.querySelectorAll('#timeline line.beat').length === %d`, beats+1))
	p.waitFor("the output followed", `document.getElementById('output-stdout').textContent === 'hello from eval-1\nmore\n'`)
	// A long output: the pane shows its latest lines, as tail -f does.
	for i := range 300 {
		out.write("eval-1", "stdout", fmt.Sprintf("line %d\n", i))
	}
	p.waitFor("the pane at its tail", `(() => { const pre = document.getElementById('output-stdout');
		return pre.textContent.endsWith('line 299\n') && pre.scrollHeight > pre.clientHeight && pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 2; })()`)
	shot := p.screenshot("job")
	if *screenshots {
		if err := os.WriteFile(filepath.Join("..", "docs", "dashboard.png"), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The daemon is away for 10 s (stopped, say), then back: it records
	// daemon.resumed and takes the gap out of every deadline.
	d.clock.Advance(10 * time.Second)
	if err := d.svc.Sweep(); err != nil {
		t.Fatal(err)
	}

	// The live leases, with the time left to grace and to toleration.
	p.open("#/leases")
	p.waitFor("w2's two leases", `document.querySelectorAll('#leases tr[data-lease]').length === 2`)
	p.waitFor("the countdowns", `[...document.querySelectorAll('#leases td.left')].every(td => /\d/.test(td.textContent))`)
	// Counted on the daemon's clock, the gap taken out: the leases were
	// heard 10 s ago, all of it the daemon's absence, so their toleration
	// (15 s) is still ahead; and the browser's clock is an hour past it.
	left := eval[[]string](p, `[...document.querySelectorAll('#leases tr[data-lease] td.left:last-child')].map(td => td.textContent)`)
	for _, l := range left {
		// The daemon's clock is known to a second: 15 s ± 1, and well
		// above the 5 s left if the absence counted.
		if s, err := time.ParseDuration(l); err != nil || s <= 8*time.Second || s > leasetest.Timing().Toleration+time.Second {
			t.Errorf("time left to toleration %q: want 8 s to 16 s, on the daemon's clock, the absence taken out", l)
		}
	}
	p.screenshot("leases")

	// The workers, reachable or not.
	p.open("#/workers")
	p.waitFor("both workers", `document.querySelectorAll('#workers tr[data-worker]').length === 2`)
	if got := eval[string](p, `document.querySelector('#workers tr[data-worker="w2"]').innerText`); !strings.Contains(got, "yes") {
		t.Errorf("w2's row %q: want reachable", got)
	}
	// Its grace (5 s) counts from its last word, the absence taken out.
	got := eval[string](p, `document.querySelector('#workers tr[data-worker="w2"] td:last-child').textContent`)
	if left, err := time.ParseDuration(got); err != nil || left < 2*time.Second || left > leasetest.Timing().Grace+time.Second {
		t.Errorf("w2's time left to grace %q: want 2 s to 6 s", got)
	}
	p.screenshot("workers")

	// The stale-report ledger, and its filters.
	p.open("#/stale")
	p.waitFor("w1's stale report", `document.querySelectorAll('#stale tr[data-seq]').length === 1`)
	if got := eval[string](p, `document.querySelector('#stale tr[data-seq]').innerText`); !strings.Contains(got, "eval-1") || !strings.Contains(got, "refs/leaselog/eval-1/late") {
		t.Errorf("the stale report %q: want eval-1's, with its ref", got)
	}
	p.screenshot("stale")
	p.open("#/stale?worker=w2")
	p.waitFor("no stale report of w2", `document.querySelector('#stale p.empty') !== null`)
	p.open("#/stale?since=2100-01-01T00:00")
	p.waitFor("no stale report in the future", `document.querySelector('#stale p.empty') !== null`)
	p.open("#/stale?job=eval-1&worker=w1")
	p.waitFor("w1's stale report again", `document.querySelectorAll('#stale tr[data-seq]').length === 1`)

	// The jobs a page (50) at a time: 54 jobs are two pages.
	var batch []map[string]any
	for i := range 50 {
		batch = append(batch, map[string]any{"id": fmt.Sprintf("p-%02d", i), "kind": "run"})
	}
	d.call("POST", "/v1/jobs/batch", map[string]any{"jobs": batch}, http.StatusOK, nil)
	p.open("#/jobs")
	p.waitFor("a full first page", `document.querySelectorAll('#jobs tr[data-job]').length === 50 && !document.querySelector('#jobs button.next').disabled`)
	p.click("next page", `#jobs button.next`)
	p.waitFor("the last page", `document.querySelectorAll('#jobs tr[data-job]').length === 4 && document.querySelector('#jobs button.next').disabled`)
	// Newest submitted first: the batch, then the seeded jobs.
	if got := eval[string](p, `[...document.querySelectorAll('#jobs tr[data-job]')].map(tr => tr.dataset.job).join(' ')`); got != "live-1 run-2 run-1 eval-1" {
		t.Errorf("the last page lists %q", got)
	}
	p.click("previous page", `#jobs button.prev`)
	p.waitFor("the first page again", `document.querySelector('#jobs tr[data-job]').dataset.job === 'p-49' && document.querySelectorAll('#jobs tr[data-job]').length === 50`)
}

// TestDashboardOutcomes: failures in plain sight. A job reported failed or
// killed is in state reported, and drawn red; one reported succeeded green;
// one cancelled grey; a poison evaluation (lost once more than its cap)
// failed, in the orange of a loss, with its reason. The jobs page filters
// by outcome, and a job's page says how it ended.
func TestDashboardOutcomes(t *testing.T) {
	b := browser(t)
	d := newDaemon(t, nil)
	d.seedOutcomes()
	p := newPage(t, b)

	p.do("load the jobs", chromedp.Navigate(d.url+"/ui/#/jobs"))
	p.waitFor("every job listed", `document.querySelectorAll('#jobs tr[data-job]').length === 6`)
	tones := eval[string](p, `[...document.querySelectorAll('#jobs tr[data-job]')].map(tr => tr.dataset.job + '=' + tr.querySelector('td:nth-child(3) .badge').dataset.tone).join(' ')`)
	if want := "waiting=waiting stopped=off poison=lost killed=bad bad=bad good=ok"; tones != want {
		t.Errorf("the jobs' tones: %q, want %q", tones, want)
	}
	// The colours themselves, as the browser draws them (style.css).
	colour := func(job string) string {
		return eval[string](p, fmt.Sprintf(`getComputedStyle(document.querySelector('#jobs tr[data-job=%q] td:nth-child(3) .badge')).color`, job))
	}
	for job, want := range map[string]string{
		"good": "rgb(31, 138, 76)", "bad": "rgb(194, 59, 50)", "killed": "rgb(194, 59, 50)",
		"poison": "rgb(199, 122, 10)", "stopped": "rgb(107, 115, 133)",
	} {
		if got := colour(job); got != want {
			t.Errorf("%s's state drawn in %s, want %s", job, got, want)
		}
	}
	if got := eval[string](p, `document.querySelector('#jobs tr[data-job="poison"]').innerText`); !strings.Contains(got, "failed") || !strings.Contains(got, "lost 2 times") {
		t.Errorf("the poison job's row %q: want failed, lost 2 times", got)
	}
	p.screenshot("outcomes")

	p.do("filter by outcome", chromedp.SetValue(chromedp.CSS(`select[name="outcome"]`), "failed"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('select[name="outcome"]').dispatchEvent(new Event('change'))`))
	p.waitFor("only the job reported failed", `document.querySelectorAll('#jobs tr[data-job]').length === 1 && document.querySelector('#jobs tr[data-job="bad"]') !== null`)
	if got := eval[string](p, `location.hash`); got != "#/jobs?outcome=failed" {
		t.Errorf("the filter in the address: %q", got)
	}
	p.open("#/jobs?outcome=killed&kind=run")
	p.waitFor("the job reported killed, from the address", `document.querySelectorAll('#jobs tr[data-job]').length === 1 && document.querySelector('#jobs tr[data-job="killed"]') !== null`)

	// A job's page: its state and outcome in their tone, and a poison job's
	// cap and reason, its failure marked on the timeline.
	p.open("#/job/bad")
	p.waitFor("the failed report", `document.querySelector('#main dl.facts .badge[data-tone="bad"]')?.textContent === 'reported' && document.querySelector('#main dl.facts .badge.outcome')?.textContent === 'failed'`)
	p.open("#/job/poison")
	p.waitFor("the poison job's failure", `document.querySelector('#timeline .mark.failed') !== null && document.querySelector('#main dl.facts .badge[data-tone="lost"]') !== null`)
	if got := eval[string](p, `document.querySelector('#main dl.facts').innerText`); !strings.Contains(got, "lost 2 times") || !strings.Contains(got, "max requeues\n1") {
		t.Errorf("the poison job's facts %q: want its reason and its cap", got)
	}
}

// TestDashboardCompacted: a job whose heartbeats were compacted shows their
// summary: one line in the event list saying how many, and on the
// timeline their count, a tick at the first and the last.
func TestDashboardCompacted(t *testing.T) {
	b := browser(t)
	d := newDaemonOutput(t, nil, nil, leasetest.Service(func(o *lease.Options) { o.HeartbeatRetention = time.Minute }))
	d.seed() // run-1 heartbeats 3 times, then is reported
	d.clock.Advance(2 * time.Minute)
	if st, _, err := d.svc.Compact(); err != nil || st.Heartbeats != 2 {
		t.Fatalf("compacted %+v, %v; want run-1's 3 heartbeats folded into 1", st, err)
	}
	p := newPage(t, b)
	p.do("load the job", chromedp.Navigate(d.url+"/ui/#/job/run-1"))
	p.waitFor("the summary listed", `document.querySelector('#events tr[data-type="lease.heartbeats"]') !== null`)
	if got := eval[string](p, `document.querySelector('#events tr[data-type="lease.heartbeats"]').innerText`); !strings.Contains(got, "3 heartbeats compacted") {
		t.Errorf("the summary's row %q: want its 3 heartbeats", got)
	}
	p.waitFor("the band", `document.querySelectorAll('#timeline g.lease').length === 1`)
	if got := eval[string](p, `document.querySelector('#timeline g.lease text').textContent`); !strings.Contains(got, "3 heartbeats") {
		t.Errorf("the band's label %q: want 3 heartbeats", got)
	}
	if n := eval[int](p, `document.querySelectorAll('#timeline line.beat').length`); n != 2 {
		t.Errorf("%d ticks, want the first heartbeat's and the last's", n)
	}
}

// The token: asked for when the daemon takes one, a wrong one refused with
// the API's message, and kept in the tab's sessionStorage only; or taken
// from the link's fragment, which then leaves the address bar.
func TestDashboardToken(t *testing.T) {
	b := browser(t)
	const tok = "dashboard-test-admin-token"
	d := newDaemon(t, &server.Auth{Admin: []string{tok}})
	d.call("POST", "/v1/jobs", map[string]any{"id": "j1", "kind": "run"}, http.StatusCreated, nil)

	p := newPage(t, b)
	p.do("load the dashboard", chromedp.Navigate(d.url+"/ui/"))
	p.waitFor("the token prompt", `document.getElementById('token-input') !== null`)
	p.screenshot("token")
	p.do("give a wrong token", chromedp.SendKeys(chromedp.CSS(`#token-input`), "not-the-token-at-all"),
		chromedp.Click(chromedp.CSS(`form.token button`)))
	p.waitFor("the refusal", `document.getElementById('token-error')?.textContent.includes('unknown token')`)
	p.do("give the token", chromedp.SendKeys(chromedp.CSS(`#token-input`), tok), chromedp.Click(chromedp.CSS(`form.token button`)))
	p.waitFor("the overview", `document.querySelector('#by-state [data-count="queued"] .n')?.textContent === '1'`)
	// EventSource sends no header: the stream takes the token as ?token=.
	p.waitFor("the event stream connected with the token", `document.getElementById('live').dataset.state === 'on'`)
	if got := eval[string](p, `sessionStorage.getItem('leaselog.token')`); got != tok {
		t.Errorf("sessionStorage holds %q, want the token", got)
	}
	if n := eval[int](p, `localStorage.length`); n != 0 {
		t.Errorf("localStorage holds %d items; the token must stay in the tab", n)
	}

	// A token that stops being good (the daemon's was replaced, say): the
	// next call refused asks for a token again.
	p.do("spoil the token", chromedp.Evaluate[chromedp.Void](`sessionStorage.setItem('leaselog.token', 'a-token-no-longer-good'); location.hash = '#/leases'`))
	p.waitFor("the token prompt again", `document.getElementById('token-input') !== null && document.getElementById('token-error')?.textContent.includes('unknown token')`)
	if got := eval[string](p, `sessionStorage.getItem('leaselog.token') ?? ''`); got != "" {
		t.Errorf("the refused token %q is still kept", got)
	}

	// A link with the token in its fragment, opened in a new tab.
	q := newPage(t, b)
	q.do("open the link", chromedp.Navigate(d.url+"/ui/#token="+tok))
	q.waitFor("the overview", `document.querySelector('#by-state [data-count="queued"] .n')?.textContent === '1'`)
	if got := eval[string](q, `location.href`); strings.Contains(got, tok) {
		t.Errorf("the address bar still shows the token: %s", got)
	}
}

// TestFilesServed checks the handler without a browser: every page's file is
// served under /ui/ with the headers that keep it to its origin.
func TestFilesServed(t *testing.T) {
	d := newDaemon(t, &server.Auth{Admin: []string{"dashboard-test-admin-token"}})
	for _, path := range []string{"/ui/", "/ui/style.css", "/ui/js/app.js", "/ui/js/timeline.js"} {
		rs, err := http.Get(d.url + path) // no token: the files need none
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(rs.Body)
		rs.Body.Close()
		if rs.StatusCode != http.StatusOK || len(body) == 0 {
			t.Errorf("GET %s: %d, %d bytes", path, rs.StatusCode, len(body))
		}
		if csp := rs.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
	}
	rs, err := http.Get(d.url + "/ui/nope.js")
	if err != nil {
		t.Fatal(err)
	}
	rs.Body.Close()
	if rs.StatusCode != http.StatusNotFound {
		t.Errorf("GET /ui/nope.js: %d, want 404", rs.StatusCode)
	}
}
