package eventlog

import (
	"fmt"
	"os"
	"strings"

	"github.com/rs/zerolog"
)

// pebbleLogger routes Pebble's messages into zerolog. Pebble calls Fatalf on
// storage errors it cannot recover from (a failed WAL sync among them); that
// must stop the process before anything else is acknowledged.
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

func defaultOnFatal(l zerolog.Logger) func(string) {
	return func(msg string) {
		l.WithLevel(zerolog.FatalLevel).Str("component", "pebble").
			Msg("storage failed; stopping so that nothing more is acknowledged: " + msg)
		os.Exit(ExitFatal)
	}
}
