package ops

import (
	"encoding/json"
	"math"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/timing"
)

// maxTimingSeconds bounds each field of a job's timing on the wire before
// the daemon's bounds judge it: a number past it (a year) would overflow a
// Duration or is a mistake.
const maxTimingSeconds = 365 * 24 * 3600

// TimingAsked is the timing a submission asks for of its own (a zero field:
// not asked), or a 400 naming the field that is no positive number of
// seconds. Whether the whole holds together and lies within the daemon's
// bounds is the service's to say (lease.SubmitItem.Timing), also naming the
// field.
func TimingAsked(in api.Submit) (timing.Config, error) {
	var c timing.Config
	for _, f := range []struct {
		key string
		v   *float64
		to  *time.Duration
	}{
		{"renew_seconds", in.RenewSeconds, &c.Renew},
		{"grace_seconds", in.GraceSeconds, &c.Grace},
		{"toleration_seconds", in.TolerationSeconds, &c.Toleration},
	} {
		if f.v == nil {
			continue
		}
		if v := *f.v; math.IsNaN(v) || v <= 0 || v > maxTimingSeconds || time.Duration(v*float64(time.Second)) <= 0 {
			return timing.Config{}, badRequest("%s: must be a positive number of seconds up to %d, is %v", f.key, maxTimingSeconds, v)
		}
		*f.to = time.Duration(*f.v * float64(time.Second))
	}
	return c, nil
}

// ownTimingOf is a job's or a lease's own timing on the wire: nil for none.
func ownTimingOf(c timing.Config) *api.Timing {
	if c == (timing.Config{}) {
		return nil
	}
	t := TimingOf(c)
	return &t
}

// HeartbeatDetails is a heartbeat's details as the service takes them.
func HeartbeatDetails(in api.Heartbeat) map[uint64][]byte {
	if len(in.Details) == 0 {
		return nil
	}
	out := make(map[uint64][]byte, len(in.Details))
	for id, d := range in.Details {
		out[id] = []byte(d)
	}
	return out
}

// rawJSON is b as a JSON document for a view, nil when empty. It copies b,
// which may share the table's memory.
func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return append(json.RawMessage(nil), b...)
}
