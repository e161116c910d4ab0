package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"

	"github.com/leaselog/leaselog/api"
)

// pagedJobs serves GET /v1/jobs over ids as the daemon pages it (the cursor
// here is the index of the next job, as a string), recording each after.
func pagedJobs(ids []string, afters *[]string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		*afters = append(*afters, q.Get("after"))
		start, _ := strconv.Atoi(q.Get("after"))
		limit, _ := strconv.Atoi(q.Get("limit"))
		end := min(start+limit, len(ids))
		out := api.Jobs{Jobs: []api.Job{}}
		for _, id := range ids[start:end] {
			out.Jobs = append(out.Jobs, api.Job{ID: id})
		}
		if end < len(ids) {
			out.Next = strconv.Itoa(end)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}

// TestAllJobsPages: the iterator reads page after page, passing each next
// back as after, until a page has none; stopping early reads no more.
func TestAllJobsPages(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e"}
	var afters []string
	ts := httptest.NewServer(pagedJobs(ids, &afters))
	defer ts.Close()
	c, err := api.NewClient(ts.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	js, err := api.Collect(c.AllJobs(context.Background(), api.JobQuery{Limit: 2}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range js {
		got = append(got, j.ID)
	}
	if !slices.Equal(got, ids) || !slices.Equal(afters, []string{"", "2", "4"}) {
		t.Fatalf("jobs %v over afters %q; want %v over \"\", 2, 4", got, afters, ids)
	}
	afters = nil
	for j, err := range c.AllJobs(context.Background(), api.JobQuery{Limit: 2}) {
		if err != nil || j.ID == "b" {
			break
		}
	}
	if len(afters) != 1 {
		t.Fatalf("stopped in the first page, yet read %d pages", len(afters))
	}
}

// TestPagesStops: a fetch's error ends the iteration with it, and so does
// a page whose next is its own cursor (which would never end).
func TestPagesStops(t *testing.T) {
	boom := errors.New("boom")
	n := 0
	_, err := api.Collect(api.Pages(context.Background(), "", func(context.Context, string) ([]int, string, error) {
		if n++; n == 2 {
			return nil, "", boom
		}
		return []int{n}, "x", nil
	}))
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
	_, err = api.Collect(api.Pages(context.Background(), "c", func(_ context.Context, after string) ([]int, string, error) {
		return []int{1}, after, nil
	}))
	if err == nil {
		t.Fatal("a next equal to its cursor: no error")
	}
}
