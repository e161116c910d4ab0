package ui_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leaselog/leaselog/server"
)

// The dashboard as an operator's console: the overview first, the jobs
// newest first with search and filters, cancel and kill for an admin, the
// timeline readable at every span.

// TestDashboardOverview: the first page counts the jobs by state and by
// outcome, the queue and its age, the workers up and down, charts the hour's reports
// and expiries, lists the latest failures and stale reports; it follows the
// log, and each count leads to the jobs it counts.
func TestDashboardOverview(t *testing.T) {
	b := browser(t)
	d := newDaemon(t, nil)
	d.seed() // eval-1 expired on w1 (its late report stale), now running on w2 with run-2; run-1 succeeded
	p := newPage(t, b)
	p.do("load the dashboard", chromedp.Navigate(d.url+"/ui/"))
	count := func(card, key string) string {
		return fmt.Sprintf(`document.querySelector('#%s [data-count="%s"] .n')?.textContent`, card, key)
	}
	p.waitFor("the counts", count("by-state", "running")+` === '2'`)
	for _, c := range []struct{ card, key, want string }{
		{"by-state", "reported", "1"}, {"by-state", "queued", "0"}, {"by-outcome", "succeeded", "1"},
		{"by-outcome", "failed", "0"}, {"queue", "depth", "0"}, {"queue", "age", "—"}, {"workers-up", "up", "1"}, {"workers-up", "down", "1"},
	} {
		if got := eval[string](p, count(c.card, c.key)); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.card, c.key, got, c.want)
		}
	}
	// This minute's bars: one job reported, one lease expired.
	for _, chart := range []struct{ id, want string }{{"chart-reported", "0.016666666666666666"}, {"chart-expired", "1"}} {
		got := eval[string](p, fmt.Sprintf(`[...document.querySelectorAll('#%s rect.bar[data-value]')].map(r => r.dataset.value).filter(v => v !== '0').join(' ')`, chart.id))
		if got != chart.want {
			t.Errorf("%s's bars above 0: %q, want %q", chart.id, got, chart.want)
		}
	}
	if got := eval[string](p, `document.getElementById('failures').innerText`); !strings.Contains(got, "eval-1") || !strings.Contains(got, "lease expired") {
		t.Errorf("the latest failures %q: want eval-1's expiry", got)
	}
	if got := eval[string](p, `document.getElementById('latest-stale').innerText`); !strings.Contains(got, "refs/leaselog/eval-1/late") {
		t.Errorf("the latest stale reports %q: want w1's for eval-1", got)
	}

	// A job submitted: counted live, and the queue's age counts from its
	// queueing, on the daemon's clock.
	d.call("POST", "/v1/jobs", map[string]any{"id": "new-1", "kind": "run"}, http.StatusCreated, nil)
	p.waitFor("the new job counted", count("queue", "depth")+` === '1' && `+count("by-state", "queued")+` === '1'`)
	d.clock.Advance(90 * time.Second)
	d.call("POST", "/v1/jobs", map[string]any{"id": "new-2", "kind": "run"}, http.StatusCreated, nil)
	p.waitFor("the queue's age", count("queue", "age")+` === '1m 30s' && document.querySelector('#queue [data-count="age"] a')?.textContent === 'new-1'`)
	shot := p.screenshot("overview")
	if *screenshots {
		if err := os.WriteFile(filepath.Join("..", "docs", "dashboard-overview.png"), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A count leads to its jobs.
	p.click("open the queued jobs", `#by-state [data-count="queued"]`)
	p.waitFor("the queued jobs", `location.hash === '#/jobs?state=queued' && [...document.querySelectorAll('#jobs tr[data-job]')].map(tr => tr.dataset.job).join(' ') === 'new-2 new-1'`)
}

// TestDashboardJobsConsole: newest first by default, a search by id
// prefix, the filters (kind too) narrowing the list, and the order by id.
func TestDashboardJobsConsole(t *testing.T) {
	b := browser(t)
	d := newDaemon(t, nil)
	var batch []map[string]any
	for i := range 12 {
		kind := "run"
		if i%3 == 0 {
			kind = "evaluation"
		}
		batch = append(batch, map[string]any{"id": fmt.Sprintf("j-%02d", i), "kind": kind})
	}
	d.call("POST", "/v1/jobs/batch", map[string]any{"jobs": batch}, http.StatusOK, nil)
	d.call("POST", "/v1/jobs", map[string]any{"id": "other", "kind": "run"}, http.StatusCreated, nil)
	p := newPage(t, b)
	listed := `[...document.querySelectorAll('#jobs tr[data-job]')].map(tr => tr.dataset.job).join(' ')`

	p.do("load the jobs", chromedp.Navigate(d.url+"/ui/#/jobs"))
	p.waitFor("newest first", listed+` === 'other j-11 j-10 j-09 j-08 j-07 j-06 j-05 j-04 j-03 j-02 j-01 j-00'`)
	p.do("search", chromedp.SendKeys(chromedp.CSS(`input[name="prefix"]`), "j-0"))
	p.waitFor("the jobs whose id starts so", listed+` === 'j-09 j-08 j-07 j-06 j-05 j-04 j-03 j-02 j-01 j-00'`)
	if got := eval[string](p, `location.hash`); got != "#/jobs?prefix=j-0" {
		t.Errorf("the search in the address: %q", got)
	}
	p.do("filter by kind", chromedp.SetValue(chromedp.CSS(`select[name="kind"]`), "evaluation"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('select[name="kind"]').dispatchEvent(new Event('change'))`))
	p.waitFor("the evaluations among them", listed+` === 'j-09 j-06 j-03 j-00'`)
	p.do("order by id", chromedp.SetValue(chromedp.CSS(`select[name="order"]`), "id"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('select[name="order"]').dispatchEvent(new Event('change'))`))
	p.waitFor("by id", listed+` === 'j-00 j-03 j-06 j-09'`)
	p.open("#/jobs?prefix=nothing-like-it")
	p.waitFor("no match", `document.querySelector('#jobs p.empty') !== null`)
}

// TestDashboardActions: an admin cancels and kills from the pages, each
// after a confirmation, through the API; an auditor is offered neither.
func TestDashboardActions(t *testing.T) {
	b := browser(t)
	const admin, auditor = "dashboard-test-admin-token", "dashboard-test-auditor-token"
	const worker = "dashboard-test-worker-token"
	d := newDaemon(t, &server.Auth{Admin: []string{admin}, Auditor: []string{auditor}, Workers: map[string]string{"w1": worker}})
	d.call("POST", "/v1/jobs", map[string]any{"id": "q1", "kind": "run"}, http.StatusCreated, nil)
	d.call("POST", "/v1/jobs", map[string]any{"id": "r1", "kind": "run"}, http.StatusCreated, nil)
	d.call("POST", "/v1/jobs", map[string]any{"id": "q2", "kind": "run"}, http.StatusCreated, nil)
	var g grants
	d.token = worker
	d.call("POST", "/v1/workers/w1/acquire", map[string]any{"max": 1, "start": true}, http.StatusOK, &g)
	d.token = admin
	state := func(id string) (st, revoke string) {
		var j struct {
			State string `json:"state"`
			Lease *struct {
				Revoke string `json:"revoke"`
			} `json:"lease"`
		}
		d.call("GET", "/v1/jobs/"+id, nil, http.StatusOK, &j)
		if j.Lease != nil {
			revoke = j.Lease.Revoke
		}
		return j.State, revoke
	}
	running := g.Leases[0].Job.ID // q1, the oldest queued
	p := newPage(t, b)
	p.do("open with the admin token", chromedp.Navigate(d.url+"/ui/#token="+admin))
	p.open("#/jobs")
	p.waitFor("the buttons", `document.querySelectorAll('#jobs tr[data-job] .actions button.cancel').length === 3`)

	// Cancel q2: asked, refused once (nothing happens), then confirmed.
	row := `#jobs tr[data-job="q2"] `
	p.click("cancel q2", row+`button.cancel`)
	p.waitFor("the confirmation", `document.querySelector('`+row+`.confirm')?.innerText.includes('Cancel q2?')`)
	p.click("say no", row+`button.no`)
	p.waitFor("the buttons back", `document.querySelector('`+row+`button.cancel') !== null`)
	if st, _ := state("q2"); st != "queued" {
		t.Fatalf("q2 %s after a cancel not confirmed, want queued", st)
	}
	p.click("cancel q2", row+`button.cancel`)
	p.click("confirm", row+`button.yes.cancel`)
	p.waitFor("q2 cancelled on the page", `document.querySelector('`+row+`.badge')?.textContent === 'cancelled'`)
	if st, _ := state("q2"); st != "cancelled" {
		t.Errorf("q2 %s after the cancel, want cancelled", st)
	}
	p.screenshot("actions")

	// Kill the running job from its page: revoked with kill, which its
	// worker hears at its next heartbeat.
	p.open("#/job/" + running)
	p.waitFor("its kill button", `document.querySelector('#job-actions button.kill') !== null`)
	p.click("kill", `#job-actions button.kill`)
	p.waitFor("the confirmation", `document.querySelector('#job-actions .confirm')?.innerText.includes('Kill `+running+`?')`)
	p.click("confirm", `#job-actions button.yes.kill`)
	p.waitFor("the kill asked", `document.querySelector('#job-actions .done')?.textContent.includes('at its next heartbeat')`)
	if st, rv := state(running); st != "running" || rv != "kill" {
		t.Errorf("%s %s, revoke %q after the kill; want running, revoked with kill", running, st, rv)
	}

	// An auditor's tab: the page decides, and offers no action.
	q := newPage(t, b)
	q.do("open with the auditor token", chromedp.Navigate(d.url+"/ui/#token="+auditor))
	q.open("#/jobs")
	q.waitFor("the page decided", `document.querySelectorAll('#jobs .actions[data-admin="no"]').length === 2`)
	if n := eval[int](q, `document.querySelectorAll('#jobs .actions button').length`); n != 0 {
		t.Errorf("%d buttons offered to an auditor", n)
	}
}

// TestDashboardTimelineAxis: the timeline's times are 24-hour, like the
// tables, and never the same label twice on a span under a second; its
// lease labels fit left of the bands; leases ten minutes apart are drawn
// across a break, each at a readable width; a lease reported failed is red.
func TestDashboardTimelineAxis(t *testing.T) {
	b := browser(t)
	d := newDaemon(t, nil)
	// quick: its whole life in 300 ms.
	d.call("POST", "/v1/jobs", map[string]any{"id": "quick", "kind": "run"}, http.StatusCreated, nil)
	var g grants
	d.call("POST", "/v1/workers/w1/acquire", map[string]any{"max": 1, "start": true}, http.StatusOK, &g)
	for range 2 {
		d.clock.Advance(100 * time.Millisecond)
		d.call("POST", "/v1/workers/w1/heartbeat", map[string]any{"leases": []uint64{g.Leases[0].Lease}}, http.StatusOK, nil)
	}
	d.clock.Advance(100 * time.Millisecond)
	d.call("POST", fmt.Sprintf("/v1/leases/%d/report", g.Leases[0].Lease), map[string]any{"worker": "w1", "outcome": "succeeded"}, http.StatusOK, nil)

	// apart: lost on w1, then, ten minutes later, run by a worker with a
	// long name for five seconds and reported failed.
	d.call("POST", "/v1/jobs", map[string]any{"id": "apart", "kind": "evaluation"}, http.StatusCreated, nil)
	d.call("POST", "/v1/workers/w1/acquire", map[string]any{"max": 1, "start": true}, http.StatusOK, &g)
	for range 16 {
		d.clock.Advance(time.Second)
		if err := d.svc.Sweep(); err != nil {
			t.Fatal(err)
		}
	}
	d.clock.Advance(10 * time.Minute)
	const long = "builder-eu-west-1-a"
	d.call("POST", "/v1/workers/"+long+"/acquire", map[string]any{"max": 1, "start": true}, http.StatusOK, &g)
	for range 5 {
		d.clock.Advance(time.Second)
		d.call("POST", "/v1/workers/"+long+"/heartbeat", map[string]any{"leases": []uint64{g.Leases[0].Lease}}, http.StatusOK, nil)
	}
	d.call("POST", fmt.Sprintf("/v1/leases/%d/report", g.Leases[0].Lease), map[string]any{"worker": long, "outcome": "failed"}, http.StatusOK, nil)

	p := newPage(t, b)
	labels := `[...document.querySelectorAll('#timeline text.axis:not(.gap)')].map(t => t.textContent)`
	p.do("load quick", chromedp.Navigate(d.url+"/ui/#/job/quick"))
	p.waitFor("its band", `document.querySelector('#timeline rect.band.reported') !== null`)
	got := eval[[]string](p, labels)
	clock := regexp.MustCompile(`^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,3})?$`)
	seen := map[string]bool{}
	for _, l := range got {
		if !clock.MatchString(l) || seen[l] {
			t.Errorf("quick's axis %q: label %q not a 24-hour time, or repeated", got, l)
		}
		seen[l] = true
	}
	if len(got) < 3 {
		t.Errorf("quick's axis %q: want a label every ~100 ms or less", got)
	}

	p.open("#/job/apart")
	p.waitFor("two bands and a break", `document.querySelectorAll('#timeline g.lease').length === 2 && document.querySelectorAll('#timeline g.break').length === 1`)
	p.screenshot("timeline-apart")
	widths := eval[[]float64](p, `[...document.querySelectorAll('#timeline rect.band')].map(r => r.width.baseVal.value)`)
	for i, w := range widths {
		if w < 60 { // of 1000: the drawing's width
			t.Errorf("band %d is %.1f wide of 1000: squashed", i, w)
		}
	}
	if got := eval[string](p, `document.querySelector('#timeline g.break text').textContent`); got != "+10m 00s" {
		t.Errorf("the break says %q, want the time skipped, +10m 00s", got)
	}
	// Every label ends left of the bands (which start at 200).
	for _, r := range eval[[]float64](p, `[...document.querySelectorAll('#timeline text.label')].map(t => { const b = t.getBBox(); return b.x + b.width; })`) {
		if r > 196 {
			t.Errorf("a lease label ends at %.1f: under the bands, cut", r)
		}
	}
	if got := eval[string](p, `document.querySelector('#timeline g.lease:last-child text.label title').textContent`); !strings.Contains(got, long) || !strings.Contains(got, "5 heartbeats") {
		t.Errorf("the long label's title %q: want it whole", got)
	}
	if got := eval[string](p, `getComputedStyle(document.querySelector('#timeline rect.band.reported')).fill`); got != "rgb(233, 164, 156)" {
		t.Errorf("the band reported failed is filled %s, want red (233, 164, 156)", got)
	}
	for _, l := range eval[[]string](p, labels) {
		if !clock.MatchString(l) {
			t.Errorf("apart's axis label %q: not a 24-hour time", l)
		}
	}
}
