package worker

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/timing"
)

// A lease's own timing (its job's) and its job's progress: what a Core
// holds of each lease beyond the daemon's timing.

// fenceOf is how long after its base h's job stops: its own timing's
// toleration − 2×renew, or the daemon's.
func (c *Core) fenceOf(h *Held) time.Duration {
	if h.own != nil {
		return h.own.SelfFence()
	}
	return c.fence()
}

// LeaseTiming is the timing a grant's lease follows: its job's own, or
// else the daemon's, as the grant tells it.
func LeaseTiming(g api.Grant) timing.Config {
	if t := ownTiming(g); t != nil {
		return *t
	}
	return ConfigOf(g.Timing)
}

// ownTiming is the timing of its own a grant's lease has: its job's.
func ownTiming(g api.Grant) *timing.Config {
	if g.Job.Timing == nil || g.Job.Timing.RenewSeconds <= 0 {
		return nil
	}
	t := ConfigOf(*g.Job.Timing)
	return &t
}

// Progress records b, what h's job says of its progress now (a JSON
// object, read by the driver from wherever the job puts it).
func (c *Core) Progress(h *Held, b []byte) {
	if len(b) != 0 && !bytes.Equal(b, h.progress) {
		h.progress = bytes.Clone(b)
	}
}

// BeatDetails is the details the heartbeat just due (BeatDue, Turn) is to
// carry: the progress of each lease that the daemon has not acknowledged
// yet. Recorded as in flight, it is acknowledged with the heartbeat's
// answer (Acked), or sent again with the next heartbeat (Unacked).
func (c *Core) BeatDetails() map[uint64]json.RawMessage {
	var out map[uint64]json.RawMessage
	for id, h := range c.held {
		if h.progress == nil || h.dropped || bytes.Equal(h.progress, h.acked) {
			continue
		}
		if out == nil {
			out = make(map[uint64]json.RawMessage)
		}
		out[id] = h.progress
		h.sending = h.progress
	}
	return out
}
