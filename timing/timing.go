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
