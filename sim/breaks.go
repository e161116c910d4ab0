package sim

import (
	"fmt"

	"github.com/leaselog/leaselog/worker"
)

// Breaks are deliberate faults in the simulated system, not in the
// weather: with one set, a suite of seeds must fail, or its checks could
// not fail at all. They live in the driver, between the worker's decision
// and its effect, so the product code stays untouched.
var breaks = map[string]string{
	"late-fence": "the fence's stops take effect 3×renew late: past the daemon's expiry",
	"no-fence":   "the fence's stops are ignored",
}

// breaker carries out a worker's stop, or breaks it.
type breaker struct {
	s    *Sim
	name string
}

func newBreaker(s *Sim, name string) (*breaker, error) {
	if _, ok := breaks[name]; name != "" && !ok {
		return nil, fmt.Errorf("sim: unknown break %q", name)
	}
	return &breaker{s: s, name: name}, nil
}

func (b *breaker) stop(w *simWorker, st worker.Stop) {
	switch {
	case b.name == "late-fence" && st.Why == "fence":
		b.s.after(3*renew, func() { st.Run.Stop(st.Kill) })
	case b.name == "no-fence" && st.Why == "fence":
	default:
		st.Run.Stop(st.Kill)
	}
}
