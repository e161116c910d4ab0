package api

import (
	"reflect"
	"testing"
)

// TestParseLabels: pairs become labels, and back the same, by key; a pair
// without '=' or a key given twice is refused.
func TestParseLabels(t *testing.T) {
	m, err := ParseLabels([]string{"repo=piloop", "gpu=a100", "note=a=b"})
	if err != nil || !reflect.DeepEqual(m, map[string]string{"gpu": "a100", "repo": "piloop", "note": "a=b"}) {
		t.Fatalf("%v, %v", m, err)
	}
	if s := LabelsString(m); s != "gpu=a100,note=a=b,repo=piloop" {
		t.Errorf("LabelsString: %q", s)
	}
	if m, err := ParseLabels(nil); m != nil || err != nil {
		t.Errorf("no pairs: %v, %v; want nil, nil", m, err)
	}
	for _, bad := range [][]string{{"gpu"}, {"=x"}, {"gpu=a", "gpu=b"}} {
		if _, err := ParseLabels(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}
