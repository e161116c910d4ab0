package api

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
)

// Paging, as every list of the API does it (see Jobs): a XxxPage method reads
// one page and returns its answer with its Next; an AllXxx method is an
// iterator over every page, from the query's After on; the plain list
// methods (Jobs, Leases, History, WorkerLeases) collect every page.

// Limits of a page, as the daemon applies them.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// JobQuery selects jobs: by state, kind and outcome (empty: any; an
// outcome selects jobs reported with it), a page of Limit (0: the daemon's
// default) after the cursor After ("" : the start).
type JobQuery struct {
	State, Kind, Outcome string
	// Labels, "key=value" pairs separated by commas, select the jobs that
	// require each of them.
	Labels string
	Limit  int
	After  string
}

// LeaseQuery selects leases: live ones unless State is set, by Worker and
// Kind, a page of Limit after the cursor After.
type LeaseQuery struct {
	State, Worker, Kind string
	Limit               int
	After               string
}

// PageQuery is a page of a list without filters: Limit items after the
// cursor After.
type PageQuery struct {
	Limit int
	After string
}

func limitArg(n int) string {
	if n <= 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// JobsPage returns one page of jobs, by id.
func (c *Client) JobsPage(ctx context.Context, q JobQuery) (Jobs, error) {
	var js Jobs
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs"+query("state", q.State, "kind", q.Kind, "outcome", q.Outcome, "labels", q.Labels, "limit", limitArg(q.Limit), "after", q.After), nil, &js)
	return js, err
}

// AllJobs iterates over the jobs q selects, page by page, from q.After on.
func (c *Client) AllJobs(ctx context.Context, q JobQuery) iter.Seq2[Job, error] {
	return Pages(ctx, q.After, func(ctx context.Context, after string) ([]Job, string, error) {
		q.After = after
		p, err := c.JobsPage(ctx, q)
		return p.Jobs, p.Next, err
	})
}

// LeasesPage returns one page of leases, by token.
func (c *Client) LeasesPage(ctx context.Context, q LeaseQuery) (Leases, error) {
	var ls Leases
	_, err := c.do(ctx, http.MethodGet, "/v1/leases"+query("state", q.State, "worker", q.Worker, "kind", q.Kind,
		"limit", limitArg(q.Limit), "after", q.After), nil, &ls)
	return ls, err
}

// AllLeases iterates over the leases q selects, page by page.
func (c *Client) AllLeases(ctx context.Context, q LeaseQuery) iter.Seq2[Lease, error] {
	return Pages(ctx, q.After, func(ctx context.Context, after string) ([]Lease, string, error) {
		q.After = after
		p, err := c.LeasesPage(ctx, q)
		return p.Leases, p.Next, err
	})
}

// HistoryPage returns one page of job id's events, by seq.
func (c *Client) HistoryPage(ctx context.Context, id string, q PageQuery) (History, error) {
	var h History
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/history"+query("limit", limitArg(q.Limit), "after", q.After), nil, &h)
	return h, err
}

// AllHistory iterates over job id's events, page by page.
func (c *Client) AllHistory(ctx context.Context, id string, q PageQuery) iter.Seq2[Event, error] {
	return Pages(ctx, q.After, func(ctx context.Context, after string) ([]Event, string, error) {
		q.After = after
		p, err := c.HistoryPage(ctx, id, q)
		return p.Events, p.Next, err
	})
}

// WorkerLeasesPage returns one page of the live leases the daemon holds for
// worker, by token.
func (c *Client) WorkerLeasesPage(ctx context.Context, worker string, q PageQuery) (Grants, error) {
	var g Grants
	_, err := c.do(ctx, http.MethodGet, "/v1/workers/"+url.PathEscape(worker)+"/leases"+query("limit", limitArg(q.Limit), "after", q.After), nil, &g)
	return g, err
}

// AllEvents iterates over the events q selects, page by page, from q.After
// on; it ends at the last event durable when its last page was read.
func (c *Client) AllEvents(ctx context.Context, q EventQuery) iter.Seq2[Event, error] {
	var after string
	if q.After > 0 {
		after = strconv.FormatUint(q.After, 10)
	}
	return Pages(ctx, after, func(ctx context.Context, after string) ([]Event, string, error) {
		q.After = 0
		if after != "" {
			n, err := strconv.ParseUint(after, 10, 64)
			if err != nil {
				return nil, "", fmt.Errorf("api: events cursor %q: %w", after, err)
			}
			q.After = n
		}
		p, err := c.Events(ctx, q)
		next := ""
		if p.Next != 0 {
			next = strconv.FormatUint(p.Next, 10)
		}
		return p.Events, next, err
	})
}

// Pages iterates over the items of a list, calling fetch for each page with
// the cursor of the page before (after, for the first) until a page has no
// next. It yields a fetch's error once, with a zero item, and stops; so does
// a next equal to the cursor it answered, which would never end.
func Pages[T any](ctx context.Context, after string, fetch func(ctx context.Context, after string) ([]T, string, error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		for first := true; first || after != ""; first = false {
			items, next, err := fetch(ctx, after)
			if err != nil {
				yield(zero, err)
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if next != "" && next == after {
				yield(zero, fmt.Errorf("api: a page's next %q is its own cursor", next))
				return
			}
			after = next
		}
	}
}

// Collect gathers every item of a paged iterator, or the first error.
func Collect[T any](seq iter.Seq2[T, error]) ([]T, error) {
	var out []T
	for v, err := range seq {
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
