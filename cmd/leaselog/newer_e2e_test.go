package main

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/internal/testkit/storetest"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
	"github.com/leaselog/leaselog/timing"
)

// TestE2ENewerStoreIsRefused: a store a newer leaselog wrote — its format
// past this build's, or its last record of a newer record version — is
// refused by `serve`, `replay` and `replay --verify` with a non-zero exit
// and a message naming both versions, and every file of it is left byte
// for byte as it was, none added.
func TestE2ENewerStoreIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		newer func(t *testing.T, dir string) []string // what the message must name
	}{
		{"format", func(t *testing.T, dir string) []string {
			if err := storetest.SetFormat(dir, eventlog.CurrentFormat+1); err != nil {
				t.Fatal(err)
			}
			return []string{fmt.Sprintf("store format %d (this build reads up to %d)", eventlog.CurrentFormat+1, eventlog.CurrentFormat)}
		}},
		{"record", func(t *testing.T, dir string) []string {
			seq, v, err := storetest.NewerLastRecord(dir)
			if err != nil {
				t.Fatal(err)
			}
			return []string{fmt.Sprintf("seq %d: record version %d (this build reads up to %d)", seq, v, v-1)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			data := filepath.Join(root, "data")
			log, svc := leasetest.Open(t, leasetest.Disk(data), leasetest.Config(timing.Default()), leasetest.Clock(clocktest.New(clocktest.Epoch)))
			if _, _, err := svc.Submit(context.Background(), "j1", event.KindRun, nil); err != nil {
				t.Fatal(err)
			}
			if err := svc.Close(); err != nil {
				t.Fatal(err)
			}
			if err := log.Close(); err != nil {
				t.Fatal(err)
			}
			want := append(tc.newer(t, data), "was written by a newer leaselog", "left as it was")
			before := testutil.DirSums(t, data)
			cfg := writeConfig(t, root, config(0))
			for _, args := range [][]string{
				{"serve", "--config", cfg, "--data", data},
				{"replay", "--data", data},
				{"replay", "--data", data, "--verify"},
			} {
				out, code := cli(t, root, childEnv(), args...)
				if code == 0 {
					t.Fatalf("%v: exit 0\n%s", args, out)
				}
				for _, w := range want {
					if !strings.Contains(out, w) {
						t.Errorf("%v: the message does not name %q:\n%s", args, w, out)
					}
				}
				if after := testutil.DirSums(t, data); !maps.Equal(after, before) {
					t.Fatalf("%v wrote to the store:\n%v\nwas\n%v", args, after, before)
				}
			}
		})
	}
}
