package lease

import "github.com/leaselog/leaselog/timing"

// Config is the timing of leases, defined in package timing so that a worker
// knows it without linking the service.
type Config = timing.Config

// ConfigError names the key of a timing that does not hold together.
type ConfigError = timing.ConfigError

// DefaultConfig is the timing of the Leases page (timing.Default).
func DefaultConfig() Config { return timing.Default() }
