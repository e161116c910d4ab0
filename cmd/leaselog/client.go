package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

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
//
// A table's rows wait for flush, which writes them with each column as wide
// as its widest cell so far (plus two spaces). Widths only grow, so rows
// flushed one at a time — a followed stream — stay in the columns of those
// before them as long as their cells fit; minWidths sizes the columns
// whose widths are known beforehand. The header goes out with the first
// row, or with a flush of a table that has none: a listing that fails
// before its first row (end) prints nothing but its error.
type printer struct {
	json   bool
	out    io.Writer
	header []string
	headed bool       // the header is queued or written
	rows   [][]string // queued, not yet written
	widths []int      // of each column but the last, in runes
}

func (f *clientFlags) printer(out io.Writer, header ...string) *printer {
	return &printer{json: f.output == "json", out: out, header: header, widths: make([]int, len(header))}
}

// minWidths makes the columns at least as wide as the cells given (a
// sample cell, or a width as a string of that length).
func (p *printer) minWidths(cells ...string) {
	for i, c := range cells {
		if i < len(p.widths) {
			p.widths[i] = max(p.widths[i], utf8.RuneCountInString(c))
		}
	}
}

// row prints v as JSON, or queues cells as a table row.
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
	p.queueHeader()
	p.rows = append(p.rows, s)
}

func (p *printer) queueHeader() {
	if !p.headed {
		p.headed = true
		p.rows = append([][]string{p.header}, p.rows...)
	}
}

// flush writes the rows queued: the header alone if there were none yet.
func (p *printer) flush() {
	if p.json {
		return
	}
	p.queueHeader()
	for _, r := range p.rows {
		p.minWidths(r...)
	}
	var b strings.Builder
	for _, r := range p.rows {
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", p.widths[i]-utf8.RuneCountInString(c)+2))
			}
		}
		b.WriteByte('\n')
	}
	p.rows = nil
	io.WriteString(p.out, b.String())
}

// end ends a listing that err failed (nil: that did not): the rows listed
// are written, and so is a header with no rows — but not one of a listing
// that failed before its first row.
func (p *printer) end(err error) {
	if err == nil || p.headed {
		p.flush()
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
