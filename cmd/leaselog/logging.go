package main

import (
	"fmt"
	"io"

	"github.com/rs/zerolog"
)

// logTimeFormat is the time of a JSON log line: RFC 3339 to the
// millisecond (zerolog's default is to the second, too coarse to order a
// heartbeat against an expiry).
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// The time format is zerolog's global: set once, before any logger runs.
func init() { zerolog.TimeFieldFormat = logTimeFormat }

// newLogger returns the logger of the daemon or a worker: JSON lines, or
// console lines for people, coloured only on a terminal (isTerminal: a
// file or a pipe gets no escape codes). Durations are logged as seconds,
// in fields whose name says so (gap_seconds, retry_in_seconds).
func newLogger(c LogConfig, w io.Writer) zerolog.Logger {
	if c.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !isTerminal(w)}
	}
	lvl, _ := parseLevel(c.Level)
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

func parseLevel(s string) (zerolog.Level, error) {
	if s == "" {
		return zerolog.InfoLevel, nil
	}
	lvl, err := zerolog.ParseLevel(s)
	if err != nil || lvl == zerolog.NoLevel {
		return 0, fmt.Errorf("unknown level %q (want debug, info, warn or error)", s)
	}
	return lvl, nil
}
