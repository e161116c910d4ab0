package server

import (
	"net/http"
	"strconv"
)

// The paging contract of every list (GET /v1/jobs, /v1/leases,
// /v1/jobs/{id}/history, /v1/workers/{worker}/leases, /v1/events): limit
// (default DefaultLimit, at most MaxLimit) and after, a cursor taken
// verbatim from a previous answer's next; next is absent on the last page.
// The order is stable — jobs by id, leases by token, events by seq — and a
// cursor names the last item of its page, so a page never repeats or skips
// an item that existed when the first page was read, whatever was added or
// ended since. Cursors are opaque to clients; each list checks its own, and
// refuses one that is not, naming the parameter (package ops has them).

// Limits of a page.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// pageParams parses the query of a list: its filters (the names given),
// limit and after, and the limit, checked. The list parses its own cursor.
func pageParams(r *http.Request, filters ...string) (map[string]string, int, error) {
	p, err := params(r, append(filters, "limit", "after")...)
	if err != nil {
		return nil, 0, err
	}
	limit, err := pageLimit(p)
	return p, limit, err
}

// pageLimit parses the limit parameter; "" is DefaultLimit.
func pageLimit(p map[string]string) (int, error) {
	v := p["limit"]
	if v == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, badRequest("limit %q: want an integer from 1 to %d", v, MaxLimit)
	}
	return n, nil
}
