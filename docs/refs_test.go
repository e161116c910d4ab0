// Package docs holds the repository's documents; its test holds the code's
// comments and the documents to the files they name.
package docs

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's top: this package is docs/.
const root = ".."

// goPath is a path a comment names: at least one folder, and a file name with
// an extension a file of the repository has.
var goPath = regexp.MustCompile(`(?:\.\.?/)*(?:[A-Za-z0-9_-][A-Za-z0-9_.-]*/)+[A-Za-z0-9_.-]*[A-Za-z0-9_-]\.(?:go|md|ya?ml|sh|py|toml|json|txt|png|mod|sum)\b`)

// goFile is a Go file's name alone, as a comment names a file of its own
// package (check.go).
var goFile = regexp.MustCompile(`\b[A-Za-z0-9_]+\.go\b`)

// elsewhere ends the error of a path that names no file of the repository.
const elsewhere = " (a file of another project is named with its module's path: github.com/nats-io/nats-server/v2/server/raft.go)"

// mdLink is the target of a Markdown link.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestCommentsNameFilesThatExist: a path in a comment of a Go file (as
// eventlog/compact.go or docs/design.md) names a file of the repository,
// from its top or from the comment's folder, and never one outside it. A Go
// file named alone (check.go) is in the comment's folder, or, when the
// comment says whose it is (eventlog's keys.go), in some folder.
func TestCommentsNameFilesThatExist(t *testing.T) {
	var goFiles []string
	base := map[string]bool{} // the names of the repository's files
	walk(t, func(name string) {
		base[filepath.Base(name)] = true
		if strings.HasSuffix(name, ".go") {
			goFiles = append(goFiles, name)
		}
	})
	fset := token.NewFileSet()
	n := 0
	for _, name := range goFiles {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range f.Comments {
			for _, c := range g.List {
				for _, m := range goPath.FindAllStringIndex(c.Text, -1) {
					p := c.Text[m[0]:m[1]]
					if !isPath(c.Text, m[0], p) {
						continue
					}
					n++
					if why := missing(p, root, filepath.Dir(name)); why != "" {
						t.Errorf("%s: a comment names %s, %s%s", fset.Position(c.Pos()), p, why, elsewhere)
					}
				}
				for _, m := range goFile.FindAllStringIndex(c.Text, -1) {
					p := c.Text[m[0]:m[1]]
					if m[0] > 0 && strings.ContainsRune("/$~.:@%{-", rune(c.Text[m[0]-1])) {
						continue // part of a path, checked above
					}
					if missing(p, filepath.Dir(name)) != "" && !base[p] {
						t.Errorf("%s: a comment names %s, which is no file of the repository", fset.Position(c.Pos()), p)
					}
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d paths found in comments: is the walk from the repository's top?", n)
	}
}

// TestDocsNameFilesThatExist: a relative link of a Markdown file of the
// repository leads to a file of it, and a path its text names (as in a
// comment) is one, from the repository's top or the document's folder.
func TestDocsNameFilesThatExist(t *testing.T) {
	walk(t, func(name string) {
		if !strings.HasSuffix(name, ".md") {
			return
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, m := range goPath.FindAllStringIndex(text, -1) {
			p := text[m[0]:m[1]]
			if !isPath(text, m[0], p) {
				continue
			}
			if why := missing(p, root, filepath.Dir(name)); why != "" {
				line := 1 + strings.Count(text[:m[0]], "\n")
				t.Errorf("%s:%d names %s, %s%s", name, line, p, why, elsewhere)
			}
		}
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if why := missing(target, filepath.Dir(name)); why != "" {
				t.Errorf("%s: a link to %s, %s", name, m[1], why)
			}
		}
	})
}

// isPath tells a path of the repository from a part of something else: a
// URL, a module path, an absolute or home path, a variable's.
func isPath(text string, at int, p string) bool {
	if at > 0 && strings.ContainsRune("/$~.:@%{", rune(text[at-1])) {
		return false
	}
	first, _, _ := strings.Cut(strings.TrimLeft(p, "./"), "/")
	return !strings.Contains(first, ".") // github.com/…, golang.org/…
}

// missing says why p is no file of the repository, taken from any of the
// folders bases, or "" if it is one.
func missing(p string, bases ...string) string {
	top, err := filepath.Abs(root)
	if err != nil {
		return err.Error()
	}
	why := "outside the repository"
	for _, base := range bases {
		abs, err := filepath.Abs(filepath.Join(base, p))
		if err != nil {
			return err.Error()
		}
		if rel, err := filepath.Rel(top, abs); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		if _, err := os.Stat(abs); err == nil {
			return ""
		}
		why = "which does not exist"
	}
	return why
}

// walk calls f with the name of each file of the repository, but for
// folders that hold no source: hidden ones, testdata, build output.
func walk(t *testing.T, f func(name string)) {
	t.Helper()
	err := filepath.WalkDir(root, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			base := d.Name()
			if name != root && (strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") || base == "testdata" || base == "bin" || base == "node_modules" || base == "leaselog-data") {
				return filepath.SkipDir
			}
			return nil
		}
		f(name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStandsAlone: no file of the repository relies on the folder of shared
// documents and tools that sits beside some checkouts, but the scripts that
// run the optional peers harness from it (and say so). The folder's name is
// spelled in two parts below, so that this file is not one of them.
func TestStandsAlone(t *testing.T) {
	shared := []string{".." + "/shared", "/work" + "/shared"}
	allowed := map[string]bool{filepath.Join(root, "scripts", "sidebyside.sh"): true}
	walk(t, func(name string) {
		if allowed[name] {
			return
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range shared {
			if i := strings.Index(string(b), s); i >= 0 {
				line := 1 + strings.Count(string(b[:i]), "\n")
				t.Errorf("%s:%d names %s, which a clone does not have", name, line, s)
			}
		}
	})
}
