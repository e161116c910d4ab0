// Package timing is the timing of leases, the one definition the daemon and
// its workers derive every deadline from: how often a worker heartbeats
// (renew), when a silent worker is unreachable (grace), when its leases
// expire (toleration), and from these the sweeper's tick and the worker's
// self-fence. It imports nothing of the project, so that a worker can know
// the rules without linking the daemon.
package timing

import (
	"fmt"
	"time"
)

// Config is the timing of leases: the keys of [plugins.executor].
type Config struct {
	Renew      time.Duration // renew_seconds: a worker heartbeats this often
	Grace      time.Duration // grace_seconds: silent this long, a worker is unreachable
	Toleration time.Duration // toleration_seconds: silent this long, its leases expire
}

// Default is the timing of the Leases page: Kubernetes' defaults.
func Default() Config {
	return Config{Renew: 10 * time.Second, Grace: 50 * time.Second, Toleration: 300 * time.Second}
}

// ConfigError names the key of a timing that does not hold together.
type ConfigError struct {
	Key     string
	Message string
}

func (e *ConfigError) Error() string { return fmt.Sprintf("config: %s: %s", e.Key, e.Message) }

// Validate checks 0 < 2×renew < grace < toleration: a worker must be able to
// miss a heartbeat before it is unreachable, and be unreachable before it loses
// its leases.
func (c Config) Validate() error {
	switch {
	case c.Renew <= 0:
		return &ConfigError{"renew_seconds", fmt.Sprintf("must be positive, is %v", c.Renew.Seconds())}
	case 2*c.Renew >= c.Grace:
		return &ConfigError{"grace_seconds", fmt.Sprintf("must exceed 2 × renew_seconds (%v), is %v", (2 * c.Renew).Seconds(), c.Grace.Seconds())}
	case c.Grace >= c.Toleration:
		return &ConfigError{"toleration_seconds", fmt.Sprintf("must exceed grace_seconds (%v), is %v", c.Grace.Seconds(), c.Toleration.Seconds())}
	}
	return nil
}

// SweepEvery is how often the daemon's sweeper ticks: often enough that short
// test timings work, never more than once a second's worth of work at
// defaults.
func (c Config) SweepEvery() time.Duration { return min(time.Second, c.Renew/2) }

// SelfFence is how long after sending its last acknowledged heartbeat a worker
// stops its jobs: two heartbeats before the daemon may expire them.
func (c Config) SelfFence() time.Duration { return c.Toleration - 2*c.Renew }

// Bounds are the limits of a job's own timing (the keys min_renew_seconds
// and max_toleration_seconds of [plugins.executor]): a renew shorter than
// MinRenew would flood the daemon with heartbeats, a toleration longer than
// MaxToleration would keep a dead worker's job leased for that long. A zero
// field sets no limit. A job's grace lies between its renew and its
// toleration, so these two bound all three.
type Bounds struct {
	MinRenew      time.Duration
	MaxToleration time.Duration
}

// DefaultBounds are the daemon's bounds: a renew of a second at least, a
// toleration of a day at most.
func DefaultBounds() Bounds { return Bounds{MinRenew: time.Second, MaxToleration: 24 * time.Hour} }

// Validate checks that some timing lies within b: MaxToleration, if set,
// leaves room for one (more than 2 × MinRenew). The keys named are b's own.
func (b Bounds) Validate() error {
	switch {
	case b.MinRenew < 0:
		return &ConfigError{"min_renew_seconds", fmt.Sprintf("must be 0 (no minimum) or more, is %v", b.MinRenew.Seconds())}
	case b.MaxToleration < 0:
		return &ConfigError{"max_toleration_seconds", fmt.Sprintf("must be 0 (no maximum) or more, is %v", b.MaxToleration.Seconds())}
	case b.MaxToleration != 0 && b.MaxToleration <= 2*b.MinRenew:
		return &ConfigError{"max_toleration_seconds", fmt.Sprintf("must exceed 2 × min_renew_seconds (%v), is %v", (2 * b.MinRenew).Seconds(), b.MaxToleration.Seconds())}
	}
	return nil
}

// Own is the timing a job asks for of its own: the fields it names (a zero
// field is not named) over def, the daemon's timing when it was submitted.
// The whole must hold together (Validate) and the fields it names lie
// within b; the error, a *ConfigError, names the field at fault.
func Own(asked, def Config, b Bounds) (Config, error) {
	c := def
	if asked.Renew != 0 {
		c.Renew = asked.Renew
	}
	if asked.Grace != 0 {
		c.Grace = asked.Grace
	}
	if asked.Toleration != 0 {
		c.Toleration = asked.Toleration
	}
	for _, f := range []struct {
		key string
		v   time.Duration
	}{{"renew_seconds", asked.Renew}, {"grace_seconds", asked.Grace}, {"toleration_seconds", asked.Toleration}} {
		if f.v < 0 {
			return Config{}, &ConfigError{f.key, fmt.Sprintf("must be positive, is %v", f.v.Seconds())}
		}
	}
	// The bounds judge what the job named: the rest is the daemon's, which
	// its configuration chose whatever the bounds.
	switch {
	case asked.Renew != 0 && c.Renew < b.MinRenew:
		return Config{}, &ConfigError{"renew_seconds", fmt.Sprintf("must be at least min_renew_seconds (%v), is %v", b.MinRenew.Seconds(), c.Renew.Seconds())}
	case asked.Toleration != 0 && b.MaxToleration != 0 && c.Toleration > b.MaxToleration:
		return Config{}, &ConfigError{"toleration_seconds", fmt.Sprintf("must be at most max_toleration_seconds (%v), is %v", b.MaxToleration.Seconds(), c.Toleration.Seconds())}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Faster is the shorter renew of a and b, the zero renew being none: a
// worker heartbeats as often as the most demanding of its leases asks.
func Faster(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}
