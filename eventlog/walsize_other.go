//go:build !linux

package eventlog

import "errors"

// canGrow says growFile sets sizes here: not on this platform, where WALs
// are written as Pebble writes them.
const canGrow = false

func growFile(fd uintptr, off, n int64) error {
	return errors.New("eventlog: growing a file is not supported on this platform")
}
