//go:build race

package server

// raceEnabled: the race detector drops some of what sync.Pool is given back,
// so a pooled buffer is sometimes made anew.
const raceEnabled = true
