package timing_test

import (
	"errors"
	"testing"

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
