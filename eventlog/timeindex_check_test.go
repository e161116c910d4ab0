package eventlog

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCheckTimeIndex: the index a log writes passes; a run key missing, a run
// key or a clock key too many, or a run key with the wrong second fails,
// naming the key.
func TestCheckTimeIndex(t *testing.T) {
	damage := map[string]func(l *Log) error{
		"run key missing": func(l *Log) error {
			seq, _, _, err := l.lastRun()
			if err != nil {
				return err
			}
			return l.db.Delete(runKey(nil, seq), pebble.Sync)
		},
		"run key too many": func(l *Log) error {
			return l.db.Set(runKey(nil, l.LastSeq()), appendSecond(nil, 1), pebble.Sync)
		},
		"clock key too many": func(l *Log) error {
			return l.db.Set(clockKey(nil, 1<<40, 1), nil, pebble.Sync)
		},
		"run of another second": func(l *Log) error {
			seq, _, _, err := l.lastRun()
			if err != nil {
				return err
			}
			return l.db.Set(runKey(nil, seq), appendSecond(nil, 123456789), pebble.Sync)
		},
	}
	for name, hurt := range damage {
		t.Run(name, func(t *testing.T) {
			l, _ := randomLog(t, rand.New(rand.NewPCG(3, 3)), vfs.NewMem(), 200)
			defer l.Close()
			if err := l.CheckTimeIndex(); err != nil {
				t.Fatalf("the index as written: %v", err)
			}
			if err := hurt(l); err != nil {
				t.Fatal(err)
			}
			if err := l.CheckTimeIndex(); !errors.Is(err, ErrTimeIndex) {
				t.Fatalf("after %s: %v, want ErrTimeIndex", name, err)
			}
		})
	}
}
