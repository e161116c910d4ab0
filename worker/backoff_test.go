package worker

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
)

func TestBackoff(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		rand func() float64
		want []time.Duration
	}{
		{"no jitter", nil, []time.Duration{50 * ms, 100 * ms, 200 * ms, 300 * ms, 300 * ms}},
		{"draw 0", func() float64 { return 0 }, []time.Duration{50 * ms, 100 * ms, 200 * ms, 300 * ms, 300 * ms}},
		{"draw 0.5", func() float64 { return 0.5 }, []time.Duration{37500 * time.Microsecond, 75 * ms, 150 * ms, 225 * ms, 225 * ms}},
		{"draw near 1", func() float64 { return 0.999999 }, []time.Duration{25000025 * time.Nanosecond, 50000050, 100000100, 150000150, 150000150}},
	} {
		b := NewBackoff(300*ms, tc.rand)
		var got []time.Duration
		for range tc.want {
			got = append(got, b.Next())
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: waits %v, want %v", tc.name, got, tc.want)
				break
			}
		}
		b.Reset()
		if d := b.Next(); d != tc.want[0] {
			t.Errorf("%s: after Reset %v, want %v", tc.name, d, tc.want[0])
		}
	}
	if d := NewBackoff(10*ms, nil).Next(); d != 10*ms {
		t.Errorf("a max below the first wait: %v", d)
	}
}

// A call that cannot reach the daemon is logged at warn, with the attempt
// and the delay drawn from the worker's random source.
func TestFailedCallsWarnWithTheirDelay(t *testing.T) {
	d, e := newFakeDaemon(), newFakeExecutor()
	d.queue = []api.Grant{grant(3, "j1")}
	d.reportErr = []error{errors.New("dial tcp: connection refused"), errors.New("dial tcp: connection refused")}
	logs := &testutil.SyncBuffer{}
	newTestWorker(t, d, e, nil, func(o *Options) {
		o.Logger = zerolog.New(logs)
		o.Rand = func() float64 { return 0.5 }
	})
	receive(t, e.started, "start").finish(Outcome{Outcome: "succeeded"})
	receive(t, d.reports, "report after two failures")
	type line struct {
		Level, Message, Call, Error string
		Attempt                     int
		Retry                       float64 `json:"retry_in_seconds"`
	}
	var got []line
	for _, s := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var l line
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("log line %q: %v", s, err)
		}
		if l.Call == "report" {
			got = append(got, l)
		}
	}
	// The delays the worker's backoff draws with its source, up to renew
	// apart (TestBackoff checks the numbers).
	b := NewBackoff(ConfigOf(daemonTiming).Renew, func() float64 { return 0.5 })
	want := []line{
		{Level: "warn", Message: "call failed; retrying", Call: "report", Error: "dial tcp: connection refused", Attempt: 1, Retry: b.Next().Seconds()},
		{Level: "warn", Message: "call failed; retrying", Call: "report", Error: "dial tcp: connection refused", Attempt: 2, Retry: b.Next().Seconds()},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("report retries logged:\n%+v\nwant:\n%+v", got, want)
	}
}
