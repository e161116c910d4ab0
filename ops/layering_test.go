package ops_test

import (
	"go/build"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/leaselog/leaselog/"

// TestLayering: ops sits between the service and the transports. It links
// the service and the documents it converts, and no transport; the
// transport over HTTP links no store, reaching the log through the service
// and ops only (the log's errors come out of lease as lease's). Only the
// packages' own files count, not their tests'.
func TestLayering(t *testing.T) {
	for _, tc := range []struct {
		dir   string
		only  []string // the packages of the project it may import; nil: any
		never []string // import paths (or their prefixes) it must not import
	}{
		{".", []string{"api", "event", "lease", "projection", "timing"}, nil},
		{"../server", nil, []string{module + "eventlog", "github.com/cockroachdb/pebble"}},
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
