package api

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ParseLabels parses "key=value" pairs, as a command line gives them, into
// labels (nil for none); a pair without '=' or a key given twice is
// refused. The daemon checks the rest (at most 16, 64 bytes each).
func ParseLabels(pairs []string) (map[string]string, error) {
	var m map[string]string
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q: want key=value", p)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("label %q: key %q given twice", p, k)
		}
		if m == nil {
			m = map[string]string{}
		}
		m[k] = v
	}
	return m, nil
}

// LabelsString renders labels as key=value pairs, by key, comma-separated:
// the form of GET /v1/jobs?labels=.
func LabelsString(m map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + m[k])
	}
	return b.String()
}
