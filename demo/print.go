package demo

// The demo's calls and what it prints of them.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/timing"
)

func (x *demo) say(format string, args ...any) { fmt.Fprintf(x.Out, format+"\n", args...) }

// answer prints an answer of the API as the JSON document it is.
func (x *demo) answer(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		x.say("   (%T: %v)", v, err)
		return
	}
	x.say("   %s", b)
}

// refusal prints an error answer of the API as its status and document.
func (x *demo) refusal(e *api.Error) {
	b, err := json.Marshal(api.ErrorBody{Error: e, StaleReportSeq: e.StaleReportSeq})
	if err != nil {
		x.say("   (%v)", err)
		return
	}
	x.say("   HTTP %d %s", e.Status, b)
}

// events prints the events appended since the last it printed.
func (x *demo) events(ctx context.Context) error {
	n := 0
	for {
		page, err := x.c.Events(ctx, api.EventQuery{After: x.shown, Limit: 1000})
		if err != nil {
			return fmt.Errorf("demo: read the events after %d: %w", x.shown, err)
		}
		for _, e := range page.Events {
			x.event(e)
			x.shown = e.Seq
			n++
		}
		if page.Next == 0 { // the last page
			break
		}
	}
	if n == 0 {
		x.say("        (no new event)")
	}
	return nil
}

// event prints one event on a line: its seq, type, and the fields it has.
func (x *demo) event(e api.Event) {
	var b strings.Builder
	fmt.Fprintf(&b, "     %4d  %-19s", e.Seq, e.Type)
	add := func(k, v string) {
		if v != "" && v != "0" {
			b.WriteString(" " + k + "=" + v)
		}
	}
	add("job", e.Job)
	add("lease", strconv.FormatUint(e.Lease, 10))
	add("worker", e.Worker)
	add("kind", e.Kind)
	add("revoke", e.Revoke)
	add("outcome", e.Outcome)
	add("ref", e.Ref)
	if e.Reason != "" {
		b.WriteString(" " + strconv.Quote(e.Reason))
	}
	if e.GapSeconds != 0 {
		add("gap", time.Duration(e.GapSeconds*float64(time.Second)).Round(time.Millisecond).String())
	}
	x.say("%s", strings.TrimRight(b.String(), " "))
}

// start starts a daemon on the demo's data with timing t and a local worker
// of capacity local, and a client of it.
func (x *demo) start(ctx context.Context, t timing.Config, local int) error {
	d, err := x.Start(ctx, Config{Data: filepath.Join(x.Dir, "data"), Timing: t, LocalCapacity: local, Log: x.log})
	if err != nil {
		return fmt.Errorf("demo: start the daemon: %w", err)
	}
	x.d = d
	// A daemon with a local worker and no [auth] makes an admin token.
	x.c, err = api.NewClient(d.URL(), d.Token())
	return err
}

// restartDaemon stops the daemon and starts it again.
func (x *demo) restartDaemon(ctx context.Context, t timing.Config, local int) error {
	err := x.d.Stop()
	x.d = nil
	if err != nil {
		return fmt.Errorf("demo: stop the daemon: %w", err)
	}
	return x.start(ctx, t, local)
}

func (x *demo) submit(ctx context.Context, id, kind, run string) error {
	spec, err := json.Marshal(api.Spec{Run: run})
	if err != nil {
		return err
	}
	_, _, err = x.c.Submit(ctx, api.Submit{ID: id, Kind: kind, Spec: spec})
	return err
}

// take has worker acquire job and start it, as a worker does.
func (x *demo) take(ctx context.Context, worker, job string) (api.Grant, error) {
	gs, err := x.c.Acquire(ctx, worker, 1, 5*time.Second)
	if err != nil {
		return api.Grant{}, err
	}
	if len(gs) != 1 || gs[0].Job.ID != job {
		return api.Grant{}, fmt.Errorf("demo: %s's acquire granted %+v, not %s", worker, gs, job)
	}
	if _, err := x.c.Start(ctx, worker, gs[0].Lease); err != nil {
		return gs[0], err
	}
	return gs[0], nil
}

// waitEvent waits for the first event of a type and job after seq after.
func (x *demo) waitEvent(ctx context.Context, typ, job string, after uint64) (api.Event, error) {
	for {
		page, err := x.c.Events(ctx, api.EventQuery{Type: typ, Job: job, After: after, Limit: 1})
		if err != nil {
			return api.Event{}, err
		}
		if len(page.Events) > 0 {
			return page.Events[0], nil
		}
		select {
		case <-ctx.Done():
			return api.Event{}, fmt.Errorf("demo: waiting for %s of %s: %w", typ, job, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func writeFile(name string) error { return os.WriteFile(name, nil, 0o644) }

// secs is a duration in seconds, as the configuration says it.
func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s" }
