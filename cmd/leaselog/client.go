package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leaselog/leaselog/api"
)

// clientFlags are the flags every client command takes.
type clientFlags struct {
	server string
	output string
	data   string
	token  string
}

func (f *clientFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.server, "server", "", serverHelp)
	cmd.Flags().StringVar(&f.token, "token", "", "the API token (default $LEASELOG_TOKEN, else a local daemon's admin token, see --data); other users may read it in the process list: prefer $LEASELOG_TOKEN")
	cmd.Flags().StringVarP(&f.output, "output", "o", "table", "table, or json (one object per line)")
	cmd.Flags().StringVar(&f.data, "data", "", "with no $LEASELOG_TOKEN, send the admin token a local daemon keeps in DIR/token (default $LEASELOG_DATA or "+defaultDataDir+")")
}

func (f *clientFlags) client(opts ...api.ClientOption) (*api.Client, error) {
	if f.output != "table" && f.output != "json" {
		return nil, fmt.Errorf("-o %s: want table or json", f.output)
	}
	server, err := resolveServer(f.server)
	if err != nil {
		return nil, err
	}
	token := f.token
	if token == "" {
		if token, err = clientToken(server, f.data); err != nil {
			return nil, err
		}
	}
	return api.NewClient(server, token, opts...)
}

// printer writes rows as a table, or objects as JSON lines.
type printer struct {
	json bool
	out  io.Writer
	tw   *tabwriter.Writer
}

func (f *clientFlags) printer(out io.Writer, header ...string) *printer {
	p := &printer{json: f.output == "json", out: out}
	if !p.json {
		p.tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(p.tw, strings.Join(header, "\t"))
	}
	return p
}

// row prints v as JSON, or cells as a table row.
func (p *printer) row(v any, cells ...any) {
	if p.json {
		b, _ := json.Marshal(v)
		fmt.Fprintln(p.out, string(b))
		return
	}
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = fmt.Sprint(c)
		if s[i] == "" {
			s[i] = "-"
		}
	}
	fmt.Fprintln(p.tw, strings.Join(s, "\t"))
}

func (p *printer) flush() {
	if p.tw != nil {
		p.tw.Flush()
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format("2006-01-02 15:04:05.000")
}

// parseSince reads --since: a duration back from now (1h, 30m) or an
// RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: want a duration (1h30m) or an RFC 3339 time", s)
	}
	return t, nil
}

func jobHeader() []string {
	return []string{"JOB", "KIND", "STATE", "LEASE", "WORKER", "ATTEMPTS", "OUTCOME", "REASON", "REF", "PRIORITY", "LABELS", "WAITING"}
}

func jobRow(p *printer, j api.Job) {
	var lease, worker any
	if j.Lease != nil {
		lease, worker = j.Lease.Lease, j.Lease.Worker
	} else {
		lease, worker = "", ""
	}
	p.row(j, j.ID, j.Kind, j.State, lease, worker, j.Attempts, j.Outcome, j.Reason, j.Ref, j.Priority, api.LabelsString(j.Labels), waiting(j))
}

// waiting says what a queued job waits for: its not_before, or a worker that
// can take it (none present).
func waiting(j api.Job) string {
	switch j.WaitingFor {
	case api.WaitingForTime:
		return "until " + j.NotBefore.Format(time.RFC3339)
	case api.WaitingForWorker:
		return "no worker takes it"
	}
	return ""
}
