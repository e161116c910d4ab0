package eventlog

import (
	"fmt"
	"os"
	"strings"

	"github.com/rs/zerolog"
)

// pebbleLogger routes Pebble's messages into zerolog. Pebble calls Fatalf on
// storage errors it cannot recover from (a MANIFEST write or sync that failed,
// a WAL it could not rotate, corruption found by a read); fatal fails the log,
// so that nothing more is acknowledged, and then calls Options.OnFatal.
type pebbleLogger struct {
	l     zerolog.Logger
	fatal func(string)
}

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug().Str("component", "pebble").Msg(strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error().Str("component", "pebble").Msg(strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.fatal(strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// ExitFatal is the status with which the default OnFatal exits (EX_SOFTWARE).
const ExitFatal = 70

// defaultOnFatal logs the failure, naming the store, and exits: Pebble does
// not expect Fatalf to return, and a process that stops is the fail-stop the
// log promises. The next start recovers the durable prefix of the log.
func defaultOnFatal(l zerolog.Logger, dir string) func(string) {
	return func(msg string) {
		l.WithLevel(zerolog.FatalLevel).Str("component", "pebble").Str("store", dir).Int("exit", ExitFatal).
			Msg("storage failed; exiting so that nothing more is acknowledged (the next start recovers every acknowledged event): " + msg)
		os.Exit(ExitFatal)
	}
}
