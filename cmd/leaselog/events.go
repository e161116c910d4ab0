package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leaselog/leaselog/api"
)

type eventFlags struct {
	clientFlags
	typ, job, worker, since string
	follow                  bool
}

func (f *eventFlags) register(cmd *cobra.Command, withType bool) {
	f.clientFlags.register(cmd)
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
		Use:   "events [--type T] [--job J] [--worker W] [--since D] [--follow]",
		Short: "List events of the log, from its indexes; --follow streams new ones",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := f.printer(cmd.OutOrStdout(), "SEQ", "TIME", "TYPE", "JOB", "LEASE", "WORKER", "DETAIL")
			err := f.list(cmd.Context(), func(e api.Event) {
				lease := ""
				if e.Lease != 0 {
					lease = strconv.FormatUint(e.Lease, 10)
				}
				p.row(e, e.Seq, fmtTime(e.Time), e.Type, e.Job, lease, e.Worker, detail(e))
				if f.follow {
					p.flush() // a live stream cannot wait to align its columns
				}
			})
			p.flush()
			return err
		},
	}
	f.register(cmd, true)
	cmd.Flags().BoolVarP(&f.follow, "follow", "f", false, "after the matching history, stream new events until interrupted")
	return cmd
}

func (m *Main) auditCommand() *cobra.Command {
	audit := &cobra.Command{Use: "audit", Short: "Questions auditors ask of the log"}
	var f eventFlags
	stale := &cobra.Command{
		Use:   "stale-reports [--job J] [--worker W] [--since D]",
		Short: "Reports refused because their lease had expired, with the ref of their commits",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.typ = "lease.stale_report"
			p := f.printer(cmd.OutOrStdout(), "SEQ", "TIME", "JOB", "LEASE", "WORKER", "OUTCOME", "REF", "REASON")
			n := 0
			err := f.list(cmd.Context(), func(e api.Event) {
				n++
				p.row(e, e.Seq, fmtTime(e.Time), e.Job, e.Lease, e.Worker, e.Outcome, e.Ref, e.Reason)
			})
			p.flush()
			if err == nil && n == 0 && f.output == "table" {
				fmt.Fprintln(cmd.ErrOrStderr(), "no stale reports")
			}
			return err
		},
	}
	f.register(stale, false)
	audit.AddCommand(stale)
	return audit
}

// list pages through the matching events, then follows the stream if asked.
func (f *eventFlags) list(ctx context.Context, each func(api.Event)) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	since, err := parseSince(f.since, time.Now())
	if err != nil {
		return err
	}
	q := api.EventQuery{Type: f.typ, Job: f.job, Worker: f.worker, Since: since, Limit: 1000}
	for {
		page, err := c.Events(ctx, q)
		if err != nil {
			return err
		}
		for _, e := range page.Events {
			each(e)
			q.After = e.Seq
		}
		if page.Next == 0 { // the last page
			break
		}
	}
	if !f.follow {
		return nil
	}
	return f.stream(ctx, q.After, func(e api.Event) {
		if (f.typ == "" || e.Type == f.typ) && (f.job == "" || e.Job == f.job) && (f.worker == "" || e.Worker == f.worker) {
			each(e)
		}
	})
}

// stream reads the server-sent events of /v1/events/stream after seq until
// ctx ends.
func (f *eventFlags) stream(ctx context.Context, after uint64, each func(api.Event)) error {
	server := f.server
	if server == "" {
		server = os.Getenv("LEASELOG_SERVER")
	}
	if server == "" {
		server = api.DefaultServer
	}
	token, err := clientToken(server, f.data)
	if err != nil {
		return err
	}
	base, hc := strings.TrimRight(server, "/"), http.DefaultClient
	if path, ok := strings.CutPrefix(server, "unix://"); ok {
		base, hc = "http://leaselog", &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/events/stream?after="+strconv.FormatUint(after, 10), nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("events stream: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var e api.Event
		if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &e); err != nil {
			return fmt.Errorf("events stream: %w", err)
		}
		each(e)
	}
	if ctx.Err() != nil {
		return nil
	}
	return sc.Err()
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
	return strings.Join(parts, " ")
}
