package scenario

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// args reads a command's arguments. The first malformed one is kept in err
// (wrapping ErrScript), and the accessors return their default after it, so
// a command reads all it needs and checks err once.
type args struct {
	c   Command
	err error
}

func (a *args) fail(key, v string, err error) {
	if a.err == nil {
		a.err = fmt.Errorf("%w: %s=%s: %w", ErrScript, key, v, err)
	}
}

// str is the argument's values joined by commas ("" for key= alone), or def
// if the command has no such argument.
func (a *args) str(key, def string) string {
	for _, x := range a.c.Args {
		if x.Key == key {
			return strings.Join(x.Vals, ",")
		}
	}
	return def
}

// list is the argument's comma-separated values; none if absent or empty.
func (a *args) list(key string) []string {
	var out []string
	for _, f := range strings.Split(a.str(key, ""), ",") {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

func (a *args) int(key string, def int) int {
	v := a.str(key, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		a.fail(key, v, err)
		return def
	}
	return n
}

// uint is a lease id: 0 if absent, which no lease has.
func (a *args) uint(key string) uint64 {
	v := a.str(key, "0")
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		a.fail(key, v, err)
	}
	return n
}

func (a *args) uints(key string) []uint64 {
	var ids []uint64
	for _, f := range a.list(key) {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			a.fail(key, f, err)
			return nil
		}
		ids = append(ids, n)
	}
	return ids
}

func (a *args) dur(key string, def time.Duration) time.Duration {
	v := a.str(key, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		a.fail(key, v, err)
		return def
	}
	return d
}

// pos is the command's first argument read as a duration: advance 1h.
func (a *args) pos() time.Duration {
	if len(a.c.Args) == 0 || len(a.c.Args[0].Vals) != 0 {
		if a.err == nil {
			a.err = fmt.Errorf("%w: %s needs a duration", ErrScript, a.c.Name)
		}
		return 0
	}
	d, err := time.ParseDuration(a.c.Args[0].Key)
	if err != nil {
		a.fail("duration", a.c.Args[0].Key, err)
	}
	return d
}

// has reports whether the command has the argument, and its values.
func (a *args) has(key string) ([]string, bool) {
	for _, x := range a.c.Args {
		if x.Key == key {
			return x.Vals, true
		}
	}
	return nil, false
}
