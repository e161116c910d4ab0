package timing_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leaselog/leaselog/timing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		c   timing.Config
		key string
	}{
		{timing.Config{Renew: 0, Grace: 5, Toleration: 10}, "renew_seconds"},
		{timing.Config{Renew: 3, Grace: 6, Toleration: 10}, "grace_seconds"},
		{timing.Config{Renew: 1, Grace: 10, Toleration: 10}, "toleration_seconds"},
		{timing.Default(), ""},
	} {
		err := tc.c.Validate()
		var ce *timing.ConfigError
		switch {
		case tc.key == "" && err != nil:
			t.Errorf("%+v: %v", tc.c, err)
		case tc.key != "" && (!errors.As(err, &ce) || ce.Key != tc.key):
			t.Errorf("%+v: %v, want an error naming %s", tc.c, err, tc.key)
		}
	}
}

func TestOwn(t *testing.T) {
	const s = time.Second
	def := timing.Default()
	b := timing.Bounds{MinRenew: s, MaxToleration: 600 * s}
	for _, tc := range []struct {
		def   timing.Config // zero: timing.Default()
		asked timing.Config
		want  timing.Config
		key   string
	}{
		{asked: timing.Config{Toleration: 60 * s}, want: timing.Config{Renew: 10 * s, Grace: 50 * s, Toleration: 60 * s}},
		{asked: timing.Config{Renew: 2 * s, Grace: 5 * s, Toleration: 8 * s}, want: timing.Config{Renew: 2 * s, Grace: 5 * s, Toleration: 8 * s}},
		{asked: timing.Config{Renew: s / 2, Grace: 5 * s, Toleration: 8 * s}, key: "renew_seconds"},
		{asked: timing.Config{Renew: -s}, key: "renew_seconds"},
		{asked: timing.Config{Grace: -s}, key: "grace_seconds"},
		{asked: timing.Config{Toleration: 601 * s}, key: "toleration_seconds"},
		{asked: timing.Config{Toleration: 40 * s}, key: "toleration_seconds"}, // not past the default grace
		{asked: timing.Config{Renew: 30 * s}, key: "grace_seconds"},           // 2 × renew reaches the default grace
		// The daemon's renew below the minimum, its toleration past the
		// maximum: the bounds judge what a job names, not the daemon's.
		{def: timing.Config{Renew: s / 10, Grace: s, Toleration: 900 * s}, asked: timing.Config{Grace: 2 * s},
			want: timing.Config{Renew: s / 10, Grace: 2 * s, Toleration: 900 * s}},
		{def: timing.Config{Renew: s / 10, Grace: s, Toleration: 900 * s}, asked: timing.Config{Renew: s / 2}, key: "renew_seconds"},
	} {
		def := def
		if tc.def != (timing.Config{}) {
			def = tc.def
		}
		got, err := timing.Own(tc.asked, def, b)
		var ce *timing.ConfigError
		switch {
		case tc.key == "" && (err != nil || got != tc.want):
			t.Errorf("%+v: %+v, %v; want %+v", tc.asked, got, err, tc.want)
		case tc.key != "" && (!errors.As(err, &ce) || ce.Key != tc.key):
			t.Errorf("%+v: %v, want an error naming %s", tc.asked, err, tc.key)
		}
	}
}

func TestBoundsValidate(t *testing.T) {
	for _, tc := range []struct {
		b   timing.Bounds
		key string
	}{
		{timing.DefaultBounds(), ""},
		{timing.Bounds{}, ""},
		{timing.Bounds{MinRenew: -1}, "min_renew_seconds"},
		{timing.Bounds{MaxToleration: -1}, "max_toleration_seconds"},
		{timing.Bounds{MinRenew: 5 * time.Second, MaxToleration: 10 * time.Second}, "max_toleration_seconds"},
	} {
		err := tc.b.Validate()
		var ce *timing.ConfigError
		switch {
		case tc.key == "" && err != nil:
			t.Errorf("%+v: %v", tc.b, err)
		case tc.key != "" && (!errors.As(err, &ce) || ce.Key != tc.key):
			t.Errorf("%+v: %v, want an error naming %s", tc.b, err, tc.key)
		}
	}
}
