package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
)

// sseServer plays a daemon's event stream, one scripted connection at a
// time, and records the Last-Event-ID each connection sent.
type sseServer struct {
	mu      sync.Mutex
	script  []func(w http.ResponseWriter, r *http.Request)
	lastIDs []string
}

func (s *sseServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.lastIDs = append(s.lastIDs, r.Header.Get("Last-Event-ID"))
	n := len(s.lastIDs) - 1
	s.mu.Unlock()
	if n >= len(s.script) {
		http.Error(w, `{"error":{"code":"internal","message":"unscripted"}}`, http.StatusInternalServerError)
		return
	}
	s.script[n](w, r)
}

func sendEvents(w http.ResponseWriter, seqs ...uint64) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for _, seq := range seqs {
		fmt.Fprintf(w, ": keepalive\n\nid: %d\nevent: lease.queued\ndata: {\"seq\":%d,\"type\":\"lease.queued\",\"job\":\"j%d\"}\n\n", seq, seq, seq)
	}
	w.(http.Flusher).Flush()
}

// TestFollowReconnects: Follow resumes a lost stream with Last-Event-ID —
// after the daemon closed it, after a 503 while it starts, after a
// connection gone silent past Idle — and passes every event once, in order.
func TestFollowReconnects(t *testing.T) {
	srv := &sseServer{}
	srv.script = []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) { sendEvents(w, 1, 2) }, // then closed
		func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"unavailable","message":"starting"}}`)
		},
		func(w http.ResponseWriter, r *http.Request) {
			sendEvents(w, 3)
			<-r.Context().Done() // silent: the client must give up on it
		},
		func(w http.ResponseWriter, r *http.Request) {
			sendEvents(w, 4)
			<-r.Context().Done()
		},
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	c, err := api.NewClient(ts.URL, "tok")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []uint64
	var retries []error
	err = c.Follow(ctx, api.EventQuery{}, func(e api.Event) error {
		got = append(got, e.Seq)
		if e.Seq == 4 {
			cancel()
		}
		return nil
	}, api.FollowOptions{MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, Idle: 100 * time.Millisecond,
		Retry: func(err error, _ time.Duration) { retries = append(retries, err) }})
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	if !slices.Equal(got, []uint64{1, 2, 3, 4}) {
		t.Fatalf("events %v, want 1 2 3 4 once each", got)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if want := []string{"", "2", "2", "3"}; !slices.Equal(srv.lastIDs, want) {
		t.Fatalf("Last-Event-ID of each connection %q, want %q", srv.lastIDs, want)
	}
	if len(retries) != 3 || !errors.Is(retries[0], api.ErrStreamEnded) || !api.IsCode(retries[1], "unavailable") || !errors.Is(retries[2], api.ErrStreamEnded) {
		t.Fatalf("retries %v: want ended, 503, ended (idle)", retries)
	}
}

// TestFollowStopsOnRefusal: a 4xx (a bad token, a bad query) is no loss to
// retry: Follow returns it.
func TestFollowStopsOnRefusal(t *testing.T) {
	srv := &sseServer{script: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":{"code":"unauthorized","message":"unknown token"}}`)
		},
	}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	c, err := api.NewClient(ts.URL, "bad")
	if err != nil {
		t.Fatal(err)
	}
	err = c.Follow(context.Background(), api.EventQuery{}, func(api.Event) error { return nil }, api.FollowOptions{})
	if !api.IsCode(err, api.CodeUnauthorized) {
		t.Fatalf("Follow with a refused token: %v, want the 401", err)
	}
}
