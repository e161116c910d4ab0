package hostclock

import (
	"testing"
	"time"
)

func TestParseIsStringsInverse(t *testing.T) {
	for _, c := range []Clock{Monotonic, Boottime} {
		got, err := Parse(c.String())
		if err != nil || got != c {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.String(), got, err, c)
		}
	}
	if _, err := Parse("realtime"); err == nil {
		t.Error("Parse(realtime) succeeded; only clocks that never step are offered")
	}
}

// Boottime counts everything Monotonic does and the host's sleep besides, so
// it is never behind; neither goes back.
func TestClocksNeverGoBack(t *testing.T) {
	m0, b0 := Monotonic.Now(), Boottime.Now()
	if b0.Before(m0) {
		t.Fatalf("boottime %v is behind monotonic %v", b0, m0)
	}
	for range 1000 {
		m, b := Monotonic.Now(), Boottime.Now()
		if m.Before(m0) || b.Before(b0) {
			t.Fatalf("a clock went back: monotonic %v → %v, boottime %v → %v", m0, m, b0, b)
		}
		m0, b0 = m, b
	}
	if m := Monotonic.Now(); m.Sub(time.Unix(0, 0)) > 200*365*24*time.Hour {
		t.Fatalf("monotonic reading %v is not a time since boot", m)
	}
}

func TestForPicksTheClockByHost(t *testing.T) {
	own, err := BootID()
	if err != nil {
		t.Skipf("no boot id on this machine (%v): not Linux", err)
	}
	cases := []struct {
		daemon string
		want   Clock
	}{
		{own, Monotonic}, // the daemon's own host: its sleep is the daemon's absence too
		{"00000000-0000-0000-0000-000000000000", Boottime}, // another host: its sleep counts
		{"", Boottime}, // not announced: the safe side
	}
	for _, c := range cases {
		if got := For(c.daemon); got != c.want {
			t.Errorf("For(%q) = %v, want %v", c.daemon, got, c.want)
		}
	}
}
