package scenario

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// Command is one directive of a script: a name, its arguments, and the input
// lines written under it.
type Command struct {
	Pos   string // file:line of the directive, for messages
	Name  string
	Args  []Arg
	Input string // the lines between the directive and its ----, trimmed
}

// Arg is one argument of a directive: key, key=value, or key=(v1, v2, ...).
type Arg struct {
	Key  string
	Vals []string
}

// ParseLine parses a directive line: a name, then arguments separated by
// spaces. It reads the lines cockroachdb/datadriven reads, so that the same
// files run from go test (through datadriven, which rewrites them) and from
// the binary (through Play, which imports nothing of testing).
func ParseLine(line string) (name string, args []Arg, err error) {
	rest := strings.TrimSpace(line)
	if rest == "" {
		return "", nil, nil
	}
	bad := func() error {
		return fmt.Errorf("cannot parse directive at column %d: %s", len(strings.TrimSpace(line))-len(rest)+1, strings.TrimSpace(line))
	}
	name, rest, _ = strings.Cut(rest, " ")
	rest = strings.TrimSpace(rest)
	for rest != "" {
		var a Arg
		i := strings.IndexAny(rest, " =")
		if i < 0 {
			i = len(rest)
		}
		a.Key, rest = rest[:i], rest[i:]
		if a.Key == "" {
			return "", nil, bad()
		}
		if strings.HasPrefix(rest, "=") {
			rest = rest[1:]
			switch {
			case rest == "" || rest[0] == ' ':
				a.Vals = []string{""}
			case rest[0] != '(':
				v, r, _ := strings.Cut(rest, " ")
				a.Vals, rest = []string{v}, r
			default:
				var ok bool
				if a.Vals, rest, ok = parenVals(rest); !ok {
					return "", nil, bad()
				}
			}
		}
		args = append(args, a)
		rest = strings.TrimSpace(rest)
	}
	return name, args, nil
}

// parenVals splits "(v1, v2, ...)rest" at its top-level commas; the values
// may hold parentheses of their own.
func parenVals(s string) (vals []string, rest string, ok bool) {
	depth, start := 0, 1
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return append(vals, s[start:i]), s[i+1:], true
			}
		case ',':
			if depth == 1 {
				vals = append(vals, s[start:i])
				start = i + 1
				for start < len(s) && s[start] == ' ' {
					start++
				}
			}
		}
	}
	return nil, "", false
}

// Play runs the script read from r on a new Runner and writes to w the
// script with what each command printed as its expected output, in the
// format cockroachdb/datadriven rewrites files to: a golden file whose
// expectations hold comes out byte for byte as it went in. name is the
// script's name in positions. Play returns the positions of the commands
// whose output differs from what the script expects; err is a failure of
// the script itself (a bad command, an invariant broken), after which w
// holds the script up to the command that failed.
func Play(r io.Reader, name string, w io.Writer) (diffs []string, err error) {
	run := New()
	defer run.Close()
	var out bytes.Buffer
	defer func() {
		b := out.Bytes()
		// As datadriven: no blank line at the end of the file.
		if n := len(b); n > 2 && b[n-1] == '\n' && b[n-2] == '\n' {
			b = b[:n-1]
		}
		if _, werr := w.Write(b); err == nil && werr != nil {
			err = werr
		}
	}()
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	lineNo := 0
	scan := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		lineNo++
		return sc.Text(), true
	}
	emit := func(s string) { out.WriteString(s + "\n") }
	for {
		line, ok := scan()
		if !ok {
			break
		}
		emit(line)
		pos := fmt.Sprintf("%s:%d", name, lineNo)
		directive := strings.TrimSpace(line)
		if strings.HasPrefix(directive, "#") {
			continue
		}
		for strings.HasSuffix(directive, `\`) {
			next, ok := scan()
			if !ok {
				break
			}
			emit(next)
			directive = strings.TrimSuffix(directive, `\`) + " " + strings.TrimSpace(next)
		}
		cmd := Command{Pos: pos}
		if cmd.Name, cmd.Args, err = ParseLine(directive); err != nil {
			return diffs, fmt.Errorf("%s: %w", pos, err)
		}
		if cmd.Name == "" {
			continue
		}
		var input strings.Builder
		separator := false
		for {
			l, ok := scan()
			if !ok {
				break
			}
			if l == "----" {
				separator = true
				break
			}
			emit(l)
			input.WriteString(l + "\n")
		}
		cmd.Input = strings.TrimSpace(input.String())
		var expected string
		if separator {
			expected = readExpected(scan)
		}
		got, err := run.Do(cmd)
		if err != nil {
			return diffs, err
		}
		if got != "" && !strings.HasSuffix(got, "\n") {
			got += "\n"
		}
		emit("----")
		if blankLine.MatchString(got) {
			emit("----")
			out.WriteString(got)
			emit("----")
			emit("----")
			emit("")
		} else {
			emit(got) // got ends in a newline: this adds the blank line after it
		}
		if got != expected {
			diffs = append(diffs, pos)
		}
	}
	if err := sc.Err(); err != nil {
		return diffs, fmt.Errorf("%s: %w", name, err)
	}
	return diffs, nil
}

// blankLine matches an output that holds a blank line, which datadriven
// fences with a second ----.
var blankLine = regexp.MustCompile(`(?m)^[\t ]*\n`)

// readExpected reads an expected output after its ----: up to the first
// blank line, or, opened by a second ----, up to a ---- ---- pair.
func readExpected(scan func() (string, bool)) string {
	var b strings.Builder
	line, ok := scan()
	if !ok {
		return ""
	}
	if line != "----" {
		for ok && strings.TrimSpace(line) != "" {
			b.WriteString(line + "\n")
			line, ok = scan()
		}
		return b.String()
	}
	for {
		line, ok := scan()
		if !ok {
			return b.String()
		}
		if line == "----" {
			next, ok := scan()
			if !ok {
				b.WriteString(line + "\n")
				return b.String()
			}
			if next == "----" {
				scan() // the blank line after the closing pair
				return b.String()
			}
			b.WriteString(line + "\n" + next + "\n")
			continue
		}
		b.WriteString(line + "\n")
	}
}
