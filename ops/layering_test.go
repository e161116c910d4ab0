package ops_test

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/leaselog/leaselog/"

// TestLayering: ops sits between the service and the transports. It links
// the service and the documents it converts, and no transport; the
// transport over HTTP links no store, reaching the log through the service
// and ops only (the log's errors come out of lease as lease's); hostclock,
// which lease and the workers read, is a leaf. Only the packages' own files
// count, not their tests'.
func TestLayering(t *testing.T) {
	for _, tc := range []struct {
		dir   string
		only  []string // the packages of the project it may import; nil: any
		never []string // import paths (or their prefixes) it must not import
	}{
		{".", []string{"api", "event", "lease", "projection", "timing"}, nil},
		{"../server", nil, []string{module + "eventlog", "github.com/cockroachdb/pebble"}},
		{"../hostclock", []string{}, nil}, // a leaf: the host's clocks, for lease and the workers
	} {
		p, err := build.ImportDir(tc.dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range p.Imports {
			if own, ok := strings.CutPrefix(imp, module); ok && tc.only != nil && !slices.Contains(tc.only, own) {
				t.Errorf("%s imports %s: it may import only %v of the project", p.Name, imp, tc.only)
			}
			for _, never := range tc.never {
				if imp == never || strings.HasPrefix(imp, never+"/") {
					t.Errorf("%s imports %s", p.Name, imp)
				}
			}
		}
	}
}

// TestInternal: internal/ holds the test kit (internal/testkit/…) and what
// the binary knows of its own build (internal/buildinfo), nothing the
// daemon's core needs. The test kit is imported by tests, by the simulation
// and by the scenario runner (which `leaselog replay --script` runs too);
// buildinfo by the binary and the server's metrics. No other package's own
// files import from internal/, so that no arrow runs from the core down to
// the kit that tests it.
func TestInternal(t *testing.T) {
	may := map[string][]string{ // a package of internal/ → who else may import it
		"internal/testkit/":  {"sim", "scenario"},
		"internal/buildinfo": {"cmd/leaselog", "server"},
	}
	checked := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); name == "testdata" || (strings.HasPrefix(name, ".") && name != "..") {
			return filepath.SkipDir
		}
		p, err := build.ImportDir(path, 0)
		if err != nil {
			if _, none := err.(*build.NoGoError); none {
				return nil
			}
			return err
		}
		dir, _ := filepath.Rel("..", path)
		dir = filepath.ToSlash(dir)
		if strings.HasPrefix(dir, "internal/") {
			return nil // the kit and the helpers import among themselves
		}
		checked++
		for _, imp := range p.Imports {
			own, ok := strings.CutPrefix(imp, module)
			if !ok || !strings.HasPrefix(own, "internal/") {
				continue
			}
			allowed := false
			for prefix, who := range may {
				if (own == prefix || strings.HasPrefix(own, prefix)) && slices.Contains(who, dir) {
					allowed = true
				}
			}
			if !allowed {
				t.Errorf("%s imports %s", dir, imp)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("checked %d packages: the walk missed the module", checked)
	}
}
