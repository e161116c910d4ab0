//go:build race

package eventlog_test

// raceEnabled: the race detector drops some of what sync.Pool is given back
// (Pebble's batches, the WAL's blocks), so what a call allocates is not what
// it copies.
const raceEnabled = true
