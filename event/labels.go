package event

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Labels are key=value pairs: those a job requires of its worker
// (lease.queued), or those a worker offers when it acquires. A key appears at
// most once. The value is held in one canonical form, the pairs sorted by key,
// each written as
//
//	+----------+-----+------------+-------+
//	| len(key) | key | len(value) | value |
//	| 1 B      |     | 1 B        |       |
//	+----------+-----+------------+-------+
//
// so that two equal sets of labels are equal strings: they compare with ==,
// key a map, and are the bytes of the record's labels field as they are.
// The zero value is no labels.
type Labels string

// Limits of labels: more, or longer, is refused with a message naming what.
const (
	MaxLabels   = 16 // labels in one set
	MaxLabelLen = 64 // bytes in a key or a value
)

// ErrLabel is wrapped by the errors of MakeLabels and ParseLabel.
var ErrLabel = errors.New("event: bad label")

// MakeLabels returns the labels of m, checked: at most MaxLabels, each key
// 1 to MaxLabelLen bytes of ASCII letters, digits and . _ - / :, each value
// at most MaxLabelLen bytes of UTF-8 with no control character.
func MakeLabels(m map[string]string) (Labels, error) {
	if len(m) > MaxLabels {
		return "", fmt.Errorf("%w: %d labels, at most %d", ErrLabel, len(m), MaxLabels)
	}
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if err := checkLabel(k, v); err != nil {
			return "", err
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b []byte
	for _, k := range keys {
		b = appendLabel(b, k, m[k])
	}
	return Labels(b), nil
}

// MustLabels is MakeLabels for tests and constants: it panics on bad labels.
func MustLabels(m map[string]string) Labels {
	l, err := MakeLabels(m)
	if err != nil {
		panic(err)
	}
	return l
}

// ParseLabel parses one "key=value", as the CLI and the query string give
// it: the key ends at the first '='.
func ParseLabel(s string) (key, value string, err error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("%w: %q is not key=value", ErrLabel, s)
	}
	if err := checkLabel(k, v); err != nil {
		return "", "", err
	}
	return k, v, nil
}

// ParseLabels parses the pairs "key=value" into labels; a key given twice
// is refused.
func ParseLabels(pairs []string) (Labels, error) {
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, err := ParseLabel(p)
		if err != nil {
			return "", err
		}
		if _, dup := m[k]; dup {
			return "", fmt.Errorf("%w: key %q given twice", ErrLabel, k)
		}
		m[k] = v
	}
	return MakeLabels(m)
}

func checkLabel(k, v string) error {
	switch {
	case k == "" || len(k) > MaxLabelLen:
		return fmt.Errorf("%w: key %q: want 1 to %d bytes", ErrLabel, k, MaxLabelLen)
	case len(v) > MaxLabelLen:
		return fmt.Errorf("%w: value of %q is %d bytes, at most %d", ErrLabel, k, len(v), MaxLabelLen)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: value of %q is not UTF-8", ErrLabel, k)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._-/:", c) >= 0) {
			return fmt.Errorf("%w: key %q: %q is not an ASCII letter, digit or one of . _ - / :", ErrLabel, k, rune(c))
		}
	}
	if strings.IndexFunc(v, unicode.IsControl) >= 0 {
		return fmt.Errorf("%w: value of %q holds a control character", ErrLabel, k)
	}
	return nil
}

func appendLabel(b []byte, k, v string) []byte {
	b = append(b, byte(len(k)))
	b = append(b, k...)
	b = append(b, byte(len(v)))
	return append(b, v...)
}

// Each calls fn on each label, by key, until fn returns false. l must be
// canonical (MakeLabels, or a record Decode checked).
func (l Labels) Each(fn func(k, v string) bool) {
	for s := string(l); len(s) > 0; {
		k, v, rest := next(s)
		if !fn(k, v) {
			return
		}
		s = rest
	}
}

func next(s string) (k, v, rest string) {
	n := int(s[0])
	k, s = s[1:1+n], s[1+n:]
	n = int(s[0])
	return k, s[1 : 1+n], s[1+n:]
}

// Len is the number of labels.
func (l Labels) Len() int {
	n := 0
	l.Each(func(string, string) bool { n++; return true })
	return n
}

// Map returns the labels as a map; nil for none.
func (l Labels) Map() map[string]string {
	if l == "" {
		return nil
	}
	m := make(map[string]string)
	l.Each(func(k, v string) bool { m[k] = v; return true })
	return m
}

// Get returns the value of key k.
func (l Labels) Get(k string) (string, bool) {
	var v string
	var ok bool
	l.Each(func(key, value string) bool {
		if key == k {
			v, ok = value, true
		}
		return key < k
	})
	return v, ok
}

// Within reports whether every label of l is in offer with an equal value:
// whether a worker offering offer may take a job that requires l. Both are
// sorted, so it is one walk of each.
func (l Labels) Within(offer Labels) bool {
	o := string(offer)
	for s := string(l); len(s) > 0; {
		k, v, rest := next(s)
		for {
			if len(o) == 0 {
				return false
			}
			ok, ov, orest := next(o)
			o = orest
			if c := cmp.Compare(ok, k); c == 0 {
				if ov != v {
					return false
				}
				break
			} else if c > 0 {
				return false
			}
		}
		s = rest
	}
	return true
}

// String renders the labels as key=value pairs, comma-separated, by key.
func (l Labels) String() string {
	var b strings.Builder
	l.Each(func(k, v string) bool {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
		return true
	})
	return b.String()
}

// Check checks that l is in canonical form, as MakeLabels makes it: for
// labels read from storage.
func (l Labels) Check() error {
	if err := checkCanonical([]byte(l)); err != nil {
		return fmt.Errorf("%w: %w", ErrLabel, err)
	}
	return nil
}

// checkCanonical checks that b is labels in canonical form, as a record's
// labels field must be.
func checkCanonical(b []byte) error {
	s, prev, n := string(b), "", 0
	for len(s) > 0 {
		if len(s) < 2 || int(s[0])+2 > len(s) || int(s[1+int(s[0])])+2+int(s[0]) > len(s) {
			return fmt.Errorf("labels truncated at byte %d", len(b)-len(s))
		}
		k, v, rest := next(s)
		if err := checkLabel(k, v); err != nil {
			return err
		}
		if n > 0 && k <= prev {
			return fmt.Errorf("label %q after %q: not sorted", k, prev)
		}
		if n++; n > MaxLabels {
			return fmt.Errorf("more than %d labels", MaxLabels)
		}
		prev, s = k, rest
	}
	return nil
}
