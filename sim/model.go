package sim

import (
	"time"

	"github.com/leaselog/leaselog/internal/testkit/linearize"
)

// The porcupine model of the lease service is package linearize's: the
// simulation's History gives it operations, as real tests' recorders do.

// Linearizability is what CheckLinearizable found.
type Linearizability = linearize.Result

// CheckLinearizable checks the history against linearize.Model within
// timeout; a timeout counts as a failure. On a failure it writes porcupine's
// visualization to a temporary file.
func CheckLinearizable(h *History, timeout time.Duration) (Linearizability, error) {
	return linearize.Check(h.Operations(), timeout)
}
