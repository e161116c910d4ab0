package eventlog

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/storetest"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
)

// TestOpenRefusesNewerStore: a store of a newer format, or whose last record
// is of a newer record version, is refused with ErrNewerFormat and a message
// naming both versions, by an open for writing as by a read-only one, and
// its files are left byte for byte as they were: no file changed, none made.
func TestOpenRefusesNewerStore(t *testing.T) {
	for _, tc := range []struct {
		name  string
		newer func(dir string) (string, error) // what the message must name
	}{
		{"format", func(dir string) (string, error) {
			return fmt.Sprintf("store format %d (this build reads up to %d)", storeFormat+1, storeFormat),
				storetest.SetFormat(dir, storeFormat+1)
		}},
		{"record", func(dir string) (string, error) {
			seq, v, err := storetest.NewerLastRecord(dir)
			return fmt.Sprintf("seq %d: record version %d (this build reads up to %d)", seq, v, v-1), err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			l, err := Open(dir, Options{Logger: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			// A second apart: the last event starts a run of the time index
			// of its own, which an open does not read again.
			for i := range 20 {
				if err := l.Append([]event.Event{{Type: event.TypeHeartbeat, Job: "j", Worker: "w", Lease: uint64(i + 1), Time: int64(i) * 1e9}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			want, err := tc.newer(dir)
			if err != nil {
				t.Fatal(err)
			}
			before := testutil.DirSums(t, dir)
			for _, readOnly := range []bool{false, true} {
				_, err := Open(dir, Options{Logger: zerolog.Nop(), ReadOnly: readOnly})
				if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), want) {
					t.Errorf("open (read-only %v): %v; want ErrNewerFormat naming %q", readOnly, err, want)
				}
				if after := testutil.DirSums(t, dir); !maps.Equal(after, before) {
					t.Fatalf("open (read-only %v) wrote to the store:\n%v\nwas\n%v", readOnly, after, before)
				}
			}
		})
	}
}
