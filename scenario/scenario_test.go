package scenario_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/leaselog/leaselog/scenario"
)

// dir holds the golden scenarios, one file per row of the Leases page (and
// the edges and corners around them).
const dir = "../testdata/scenarios"

// TestScenarios runs the golden files through datadriven: regenerate them
// with -rewrite and review the diff.
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, dir, func(t *testing.T, path string) {
		r := scenario.New()
		defer r.Close()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := r.Do(CommandOf(d))
			if err != nil {
				t.Fatal(err)
			}
			return out
		})
	})
}

// CommandOf is the command of a datadriven directive.
func CommandOf(d *datadriven.TestData) scenario.Command {
	c := scenario.Command{Pos: d.Pos, Name: d.Cmd, Input: d.Input}
	for _, a := range d.CmdArgs {
		c.Args = append(c.Args, scenario.Arg{Key: a.Key, Vals: a.Vals})
	}
	return c
}

// leasesPage is every row of the Leases page (docs/design.md, the product
// document the design comes from): its words, its timing keys and its "what happens"
// table. Each has a scenario whose first line names it.
var leasesPage = []string{
	`Word: "Job `, `Word: "Worker `, `Word: "Heartbeat `, `Word: "Fencing token `, `Word: "Revoke `,
	`Timing: "renew_seconds `, `Timing: "grace_seconds `, `Timing: "toleration_seconds `,
	`What happens: "A worker dies during a run `, `What happens: "A worker dies during an evaluation `,
	`What happens: "A late report `, `What happens: "The same report twice `,
	`What happens: "The machine sleeps `, `What happens: "leaselog serve restarts `,
}

func TestEveryRowOfTheLeasesPageHasAScenario(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var firsts []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(b), "\n")
		firsts = append(firsts, first)
	}
	for _, row := range leasesPage {
		found := false
		for _, first := range firsts {
			found = found || strings.HasPrefix(first, "# "+row)
		}
		if !found {
			t.Errorf("no scenario in %s begins with %q", dir, "# "+row)
		}
	}
}

// TestPlayWritesTheFileBack: Play reads what datadriven reads and writes what
// datadriven's -rewrite writes, so a golden file comes back byte for byte.
func TestPlayWritesTheFileBack(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in %s: %v", dir, err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			diffs, err := scenario.Play(bytes.NewReader(want), path, &got)
			if err != nil {
				t.Fatal(err)
			}
			if len(diffs) != 0 || got.String() != string(want) {
				t.Fatalf("Play differs at %v:\n%s", diffs, got.String())
			}
		})
	}
}

func TestPlayNamesTheOutputsThatDiffer(t *testing.T) {
	script := "# a comment\nopen\n----\n1 @0s daemon.started\n\nadvance 1s\n----\nsomething\n\nsubmit id=j1 kind=run\n{\"a\": 1}\n----\n----\nwrong\n\nstill wrong\n----\n----\n"
	want := "# a comment\nopen\n----\n1 @0s daemon.started\n\nadvance 1s\n----\n\nsubmit id=j1 kind=run\n{\"a\": 1}\n----\njob j1 run queued created=true\n2 @1s lease.queued job=j1 kind=run spec={\"a\":1}\n"
	var got bytes.Buffer
	diffs, err := scenario.Play(strings.NewReader(script), "s", &got)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(diffs, " ") != "s:6 s:10" {
		t.Errorf("diffs = %v, want [s:6 s:10]", diffs)
	}
	if got.String() != want {
		t.Errorf("Play wrote\n%s\nwant\n%s", got.String(), want)
	}
}

func TestPlayStopsAtABadScript(t *testing.T) {
	for _, script := range []string{
		"submit id=j1 kind=run\n----\n",
		"open\n----\n\nfly\n----\n",
		"open\n----\n\nadvance soon\n----\n",
		"open\n----\n\nbeat worker=w1 leases=1,x\n----\n",
	} {
		var out bytes.Buffer
		if _, err := scenario.Play(strings.NewReader(script), "s", &out); !errors.Is(err, scenario.ErrScript) {
			t.Errorf("%q: err = %v, want ErrScript", script, err)
		}
	}
}

func TestParseLine(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"open", "open"},
		{"  tick 30s beat=w1,w2", "tick [30s] [beat w1,w2]"},
		{"beat worker=w1 leases=", "beat [worker w1] [leases ]"},
		{"report reason=(run directory gone, (really)) lease=3", "report [reason run directory gone|(really)] [lease 3]"},
	} {
		name, args, err := scenario.ParseLine(tc.line)
		if err != nil {
			t.Fatalf("%q: %v", tc.line, err)
		}
		got := name
		for _, a := range args {
			got += " [" + a.Key
			if a.Vals != nil {
				got += " " + strings.Join(a.Vals, "|")
			}
			got += "]"
		}
		if got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.line, got, tc.want)
		}
		dname, dargs, err := datadriven.ParseLine(tc.line)
		if err != nil || dname != name || len(dargs) != len(args) {
			t.Errorf("%q: datadriven reads %q %v (%v)", tc.line, dname, dargs, err)
		}
		for i := range dargs {
			if dargs[i].Key != args[i].Key || strings.Join(dargs[i].Vals, "|") != strings.Join(args[i].Vals, "|") {
				t.Errorf("%q: arg %d: datadriven reads %v, we %v", tc.line, i, dargs[i], args[i])
			}
		}
	}
	if _, _, err := scenario.ParseLine("report reason=(unclosed"); err == nil {
		t.Error("an unclosed ( parsed")
	}
}
