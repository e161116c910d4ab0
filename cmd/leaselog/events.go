package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
)

type eventFlags struct {
	clientFlags
	page                    pageFlags
	typ, job, worker, since string
	follow                  bool
	// stderr is where a follow tells of a lost stream; nil: nowhere.
	stderr io.Writer
}

func (f *eventFlags) register(cmd *cobra.Command, withType bool, what string) {
	f.clientFlags.register(cmd)
	f.page.register(cmd, what)
	if withType {
		cmd.Flags().StringVar(&f.typ, "type", "", "only events of this type (e.g. lease.stale_report)")
	}
	cmd.Flags().StringVar(&f.job, "job", "", "only events of this job")
	cmd.Flags().StringVar(&f.worker, "worker", "", "only events of this worker")
	cmd.Flags().StringVar(&f.since, "since", "", "only events since this long ago (1h) or this RFC 3339 time")
}

func (m *Main) eventsCommand() *cobra.Command {
	var f eventFlags
	cmd := &cobra.Command{
		Use:   "events [--type T] [--job J] [--worker W] [--since D] [--limit N | --all] [--follow]",
		Short: "List events of the log, from its indexes, a page at a time; --follow streams new ones",
		Long: `List events of the log, oldest first, a page at a time (--limit, default 100);
--all lists every page. --follow lists every matching event, then streams new
ones until interrupted; when the stream is lost (the daemon restarted), it
connects again with backoff and resumes after the last event shown
(Last-Event-ID), so that no event is shown twice or missed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.page.check(cmd); err != nil {
				return err
			}
			f.stderr = cmd.ErrOrStderr()
			p := f.printer(cmd.OutOrStdout(), "SEQ", "TIME", "TYPE", "JOB", "LEASE", "WORKER", "DETAIL")
			if f.follow {
				// Rows come one at a time: give the columns whose widths
				// are known theirs from the start.
				p.minWidths("1234567", fmtTime(time.Now()), widestType(), "", "12345")
			}
			next, err := f.list(cmd.Context(), func(e api.Event) {
				lease := ""
				if e.Lease != 0 {
					lease = strconv.FormatUint(e.Lease, 10)
				}
				p.row(e, e.Seq, fmtTime(e.Time), e.Type, e.Job, lease, e.Worker, detail(e))
				if f.follow {
					p.flush() // a live stream cannot wait: its rows keep the columns' widths
				}
			}, p.flush)
			return f.page.done(cmd.ErrOrStderr(), p, next, err)
		},
	}
	f.register(cmd, true, "events")
	cmd.Flags().BoolVarP(&f.follow, "follow", "f", false, "after every matching event, stream new ones until interrupted, reconnecting when the daemon restarts")
	return cmd
}

func (m *Main) auditCommand() *cobra.Command {
	audit := &cobra.Command{Use: "audit", Short: "Questions auditors ask of the log"}
	var f eventFlags
	stale := &cobra.Command{
		Use:   "stale-reports [--job J] [--worker W] [--since D] [--limit N | --all]",
		Short: "Reports refused as stale — their lease had expired, or was reported otherwise — with the ref of their commits",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.page.check(cmd); err != nil {
				return err
			}
			f.typ = "lease.stale_report"
			p := f.printer(cmd.OutOrStdout(), "SEQ", "TIME", "JOB", "LEASE", "WORKER", "OUTCOME", "REF", "REASON")
			n := 0
			next, err := f.list(cmd.Context(), func(e api.Event) {
				n++
				p.row(e, e.Seq, fmtTime(e.Time), e.Job, e.Lease, e.Worker, e.Outcome, e.Ref, e.Reason)
			}, p.flush)
			err = f.page.done(cmd.ErrOrStderr(), p, next, err)
			if err == nil && n == 0 && f.output == "table" {
				fmt.Fprintln(cmd.ErrOrStderr(), "no stale reports")
			}
			return err
		},
	}
	f.register(stale, false, "stale reports")
	audit.AddCommand(stale)
	return audit
}

// list shows a page of the matching events (every page with --all or
// --follow), then follows the stream if asked, calling flush before it
// waits on the stream. It returns the cursor of the next page when it
// stopped before the last.
func (f *eventFlags) list(ctx context.Context, show func(api.Event), flush func()) (string, error) {
	c, err := f.client()
	if err != nil {
		return "", err
	}
	since, err := parseSince(f.since, time.Now())
	if err != nil {
		return "", err
	}
	q := api.EventQuery{Type: f.typ, Job: f.job, Worker: f.worker, Since: since}
	f.page.all = f.page.all || f.follow
	q.Limit = f.page.size()
	next, err := each(&f.page, func(after string) ([]api.Event, string, error) {
		q.After = 0
		if after != "" {
			n, err := strconv.ParseUint(after, 10, 64)
			if err != nil {
				return nil, "", fmt.Errorf("--after %q: an events cursor is a sequence number", after)
			}
			q.After = n
		}
		page, err := c.Events(ctx, q)
		if err != nil {
			return nil, "", err
		}
		next := ""
		if page.Next != 0 {
			next = strconv.FormatUint(page.Next, 10)
		}
		if n := len(page.Events); n > 0 {
			q.After = page.Events[n-1].Seq
		}
		return page.Events, next, nil
	}, show)
	if err != nil || !f.follow {
		return next, err
	}
	flush()
	return "", f.streamFrom(ctx, c, q, show)
}

// stream follows the events of /v1/events/stream after seq after, until ctx
// ends.
func (f *eventFlags) stream(ctx context.Context, after uint64, each func(api.Event)) error {
	if f.output == "" {
		f.output = "table" // flags made in code (the e2e harness), not parsed
	}
	c, err := f.client()
	if err != nil {
		return err
	}
	return f.streamFrom(ctx, c, api.EventQuery{Type: f.typ, Job: f.job, Worker: f.worker, After: after}, each)
}

// streamFrom follows the stream q selects until ctx ends: a lost stream is
// told on f.stderr and resumed (api.Client.Follow).
func (f *eventFlags) streamFrom(ctx context.Context, c *api.Client, q api.EventQuery, each func(api.Event)) error {
	lost := false
	return c.Follow(ctx, q, func(e api.Event) error {
		each(e)
		return nil
	}, api.FollowOptions{
		Retry: func(err error, wait time.Duration) {
			if f.stderr != nil {
				fmt.Fprintf(f.stderr, "events: %v; connecting again in %v\n", err, wait.Round(time.Millisecond))
			}
			lost = true
		},
		Connected: func() {
			if lost && f.stderr != nil {
				fmt.Fprintln(f.stderr, "events: stream resumed")
			}
			lost = false
		},
	})
}

// widestType is the longest name of an event type.
func widestType() string {
	w := ""
	for _, t := range event.Types() {
		if s := t.String(); len(s) > len(w) {
			w = s
		}
	}
	return w
}

func detail(e api.Event) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("kind", e.Kind)
	add("revoke", e.Revoke)
	add("outcome", e.Outcome)
	add("ref", e.Ref)
	if e.Reason != "" {
		parts = append(parts, strconv.Quote(e.Reason))
	}
	if e.GapSeconds != 0 {
		add("gap", time.Duration(e.GapSeconds*float64(time.Second)).Round(time.Millisecond).String())
	}
	if h := e.Heartbeats; h != nil {
		// The summary of compacted heartbeats: how many, from the first (its
		// seq and time) to the last (this event's).
		parts = append(parts, fmt.Sprintf("heartbeats=%d first_seq=%d first=%q", h.Count, h.FirstSeq, fmtTime(h.FirstTime)))
	}
	return strings.Join(parts, " ")
}
