package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/server"
)

// TestScheduleOverHTTP: a job's labels, priority and not_before go in with
// its submission and come back in its view; a queued job no worker present
// takes says so, and is counted in leaselog_jobs_unroutable; an acquire
// with kinds and labels is granted only what it takes, best first; a list
// filters by labels.
func TestScheduleOverHTTP(t *testing.T) {
	f := newFixture(t, server.Options{})
	later := f.clock.Now().Add(time.Hour).UTC()
	for _, s := range []api.Submit{
		{ID: "gpu", Kind: "evaluation", Labels: map[string]string{"gpu": "a100"}, Priority: 1},
		{ID: "low", Kind: "evaluation", Priority: -1},
		{ID: "high", Kind: "evaluation", Priority: 7},
		{ID: "run", Kind: "run"},
		{ID: "later", Kind: "run", NotBefore: later.Format(time.RFC3339)},
	} {
		decode[api.Job](t, f.do("POST", "/v1/jobs", "", s), http.StatusCreated)
	}
	j := decode[api.Job](t, f.do("GET", "/v1/jobs/gpu", "", nil), http.StatusOK)
	if j.Labels["gpu"] != "a100" || j.Priority != 1 || j.WaitingFor != api.WaitingForWorker || !j.Unroutable {
		t.Errorf("the gpu job with no worker: %+v, want its labels, priority 1, waiting for a worker, unroutable", j)
	}
	j = decode[api.Job](t, f.do("GET", "/v1/jobs/later", "", nil), http.StatusOK)
	if j.NotBefore == nil || !j.NotBefore.Equal(later) || j.WaitingFor != api.WaitingForTime {
		t.Errorf("the delayed job: not_before %v, waiting for %q; want %v, %q", j.NotBefore, j.WaitingFor, later, api.WaitingForTime)
	}
	metric := func() string {
		for _, line := range strings.Split(string(f.do("GET", "/metrics", "", nil).body), "\n") {
			if strings.HasPrefix(line, "leaselog_jobs_unroutable ") {
				return line
			}
		}
		return "none"
	}
	if got := metric(); got != "leaselog_jobs_unroutable 5" {
		t.Errorf("with no worker: %s, want 5", got)
	}

	acquire := func(worker string, a api.Acquire) []string {
		gs := decode[api.Grants](t, f.do("POST", "/v1/workers/"+worker+"/acquire", "", a), http.StatusOK)
		var ids []string
		for _, g := range gs.Leases {
			ids = append(ids, g.Job.ID)
		}
		return ids
	}
	evals := api.Offer{Kinds: []string{"evaluation"}}
	if got := fmt.Sprint(acquire("cpu", api.Acquire{Max: 1, Offer: evals})); got != "[high]" {
		t.Errorf("the evaluation worker got %s, want [high]", got)
	}
	if got := metric(); got != "leaselog_jobs_unroutable 3" { // gpu, run, later
		t.Errorf("with an evaluation worker: %s, want 3", got)
	}
	a100 := api.Offer{Kinds: []string{"evaluation"}, Labels: map[string]string{"gpu": "a100", "zone": "eu"}}
	if got := fmt.Sprint(acquire("a100", api.Acquire{Max: 5, Offer: a100})); got != "[gpu low]" {
		t.Errorf("the a100 worker got %s, want [gpu low]", got)
	}
	if got := fmt.Sprint(acquire("any", api.Acquire{Max: 5})); got != "[run]" {
		t.Errorf("a worker of every kind got %s, want [run]: later is not due", got)
	}

	js := decode[api.Jobs](t, f.do("GET", "/v1/jobs?labels=gpu=a100", "", nil), http.StatusOK)
	if len(js.Jobs) != 1 || js.Jobs[0].ID != "gpu" {
		t.Errorf("jobs?labels=gpu=a100: %+v, want the gpu job", js.Jobs)
	}
	js = decode[api.Jobs](t, f.do("GET", "/v1/jobs?labels=gpu=h100", "", nil), http.StatusOK)
	if len(js.Jobs) != 0 {
		t.Errorf("jobs?labels=gpu=h100: %+v, want none", js.Jobs)
	}
}
