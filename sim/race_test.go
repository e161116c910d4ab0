//go:build race

package sim

// raceEnabled: the race detector slows a run about tenfold, so the suite
// runs fewer seeds by default.
const raceEnabled = true
