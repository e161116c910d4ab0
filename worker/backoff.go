package worker

import (
	"math/rand/v2"
	"time"
)

// Backoff is how long a worker waits after each failed call: from 50ms,
// doubling, up to max, less up to half of it at random (jitter), so that
// workers cut off together do not all call back at the same instant. Every
// retry delay of a worker is computed here.
type Backoff struct {
	next, max time.Duration
	// rand draws in [0, 1); nil waits the exact doubling (the simulation's
	// replays are deterministic).
	rand func() float64
}

// NewBackoff returns a backoff that waits at most max, with jitter drawn
// from rand (nil: none).
func NewBackoff(max time.Duration, rand func() float64) *Backoff {
	return &Backoff{next: 50 * time.Millisecond, max: max, rand: rand}
}

// Next returns the wait after one more failure.
func (b *Backoff) Next() time.Duration {
	d := min(b.next, b.max)
	b.next = min(2*b.next, b.max)
	if b.rand != nil {
		d -= time.Duration(b.rand() * float64(d) / 2)
	}
	return d
}

// Reset starts over after a success.
func (b *Backoff) Reset() { b.next = 50 * time.Millisecond }

// defaultRand is the jitter of a worker whose Options.Rand is nil.
func defaultRand() float64 { return rand.Float64() }
