package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/leaselog/leaselog/scenario"
)

// TestReplayScriptPrintsTheGoldenFiles plays every golden scenario through the
// binary's command and holds what it prints against the file, directive by
// directive, with datadriven (so -rewrite here rewrites the files from the
// binary's output), and then byte for byte.
func TestReplayScriptPrintsTheGoldenFiles(t *testing.T) {
	files, err := filepath.Glob("../../testdata/scenarios/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			out, runErr := run(t, "replay", "--script", path)
			// What the binary printed, directive by directive: its own
			// output read back as a script, with its outputs as expected.
			var got []string
			datadriven.RunTestFromString(t, out, func(t *testing.T, d *datadriven.TestData) string {
				got = append(got, d.Expected)
				return d.Expected
			})
			i := 0
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				if i >= len(got) {
					t.Fatalf("%s: the binary printed no output for it:\n%s", d.Pos, out)
				}
				i++
				return got[i-1]
			})
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if runErr != nil || out != string(want) {
				t.Fatalf("replay --script %s: %v\n%s", path, runErr, out)
			}
		})
	}
}

func TestReplayScriptNamesWhatDiffers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	script := "open\n----\n1 @0s daemon.started\n\nsubmit id=j1 kind=run\n----\njob j1 run queued created=false\n"
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "replay", "--script", path)
	if err == nil || !strings.Contains(err.Error(), "1 outputs differ from the file's, at "+path+":5") {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(out, "job j1 run queued created=true\n2 @0s lease.queued") {
		t.Errorf("the played script does not show what the command printed:\n%s", out)
	}

	if err := os.WriteFile(path, []byte("open\n----\n\nfly\n----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "replay", "--script", path); !errors.Is(err, scenario.ErrScript) {
		t.Errorf("an unknown command: err = %v, want scenario.ErrScript", err)
	}
	if _, err := run(t, "replay", "--script", path, "--data", t.TempDir()); err == nil {
		t.Error("--script with --data: no error")
	}
	if _, err := run(t, "replay", "--script", filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing script: err = %v, want a not-exist error", err)
	}
}
