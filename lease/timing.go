package lease

import (
	"errors"
	"fmt"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/timing"
)

// ownTiming is the timing a job that asks for asked of its own will have:
// the fields it names over the daemon's timing, checked as a whole and
// against the bounds. The error (ErrInvalid) names the field at fault.
func (s *Service) ownTiming(asked timing.Config) (timing.Config, error) {
	c, err := timing.Own(asked, s.cfg, s.bounds)
	if err != nil {
		var ce *timing.ConfigError
		if errors.As(err, &ce) {
			return timing.Config{}, fmt.Errorf("%w: %s: %s", ErrInvalid, ce.Key, ce.Message)
		}
		return timing.Config{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return c, nil
}

// sameTiming reports whether a submission asking for asked is one of a job
// recorded with has (zero: the daemon's): each field it names is the job's.
// One that names none is the same job whatever its timing, as one that
// names no max_requeues is.
func sameTiming(asked, has timing.Config) bool {
	same := func(a, h int64) bool { return a == 0 || a == h }
	return same(int64(asked.Renew), int64(has.Renew)) && same(int64(asked.Grace), int64(has.Grace)) &&
		same(int64(asked.Toleration), int64(has.Toleration))
}

// timingWords says what timing a job has, for a message.
func timingWords(c timing.Config) string {
	if c == (timing.Config{}) {
		return "the daemon's timing"
	}
	return fmt.Sprintf("renew_seconds %v, grace_seconds %v, toleration_seconds %v", c.Renew.Seconds(), c.Grace.Seconds(), c.Toleration.Seconds())
}

// checkDetails checks and normalises the details of a heartbeat naming
// ids (see HeartbeatDetails): each compact JSON, an object, at most
// event.MaxDetailsLen bytes or replaced by {"cut":N}. The map returned is
// a new one.
func checkDetails(ids []uint64, details map[uint64][]byte) (map[uint64][]byte, error) {
	if len(details) == 0 {
		return nil, nil
	}
	named := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		named[id] = true
	}
	out := make(map[uint64][]byte, len(details))
	for id, b := range details {
		if !named[id] {
			return nil, fmt.Errorf("%w: details: lease %d is not among the heartbeat's leases", ErrInvalid, id)
		}
		c, err := compactJSON(b)
		if err != nil {
			return nil, fmt.Errorf("%w: details of lease %d: %v", ErrInvalid, id, err)
		}
		if len(c) == 0 || c[0] != '{' {
			return nil, fmt.Errorf("%w: details of lease %d: must be a JSON object", ErrInvalid, id)
		}
		out[id] = cutDetails(c)
	}
	return out, nil
}

// cutDetails replaces details past their bound by a note of their size.
func cutDetails(b []byte) []byte {
	if len(b) <= event.MaxDetailsLen {
		return b
	}
	return fmt.Appendf(nil, `{"cut":%d}`, len(b))
}
