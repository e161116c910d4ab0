package event

import (
	"errors"
	"strings"
	"testing"
)

func TestMakeLabels(t *testing.T) {
	long := strings.Repeat("x", MaxLabelLen)
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[string(rune('a'+i))] = "v"
	}
	for _, tc := range []struct {
		name string
		m    map[string]string
		want string // String() of the labels, or the error's text
		bad  bool
	}{
		{"none", nil, "", false},
		{"sorted", map[string]string{"repo": "piloop", "gpu": "a100"}, "gpu=a100,repo=piloop", false},
		{"empty value", map[string]string{"ssd": ""}, "ssd=", false},
		{"longest", map[string]string{long: long}, long + "=" + long, false},
		{"key too long", map[string]string{long + "x": "v"}, "want 1 to 64 bytes", true},
		{"value too long", map[string]string{"k": long + "x"}, "65 bytes, at most 64", true},
		{"empty key", map[string]string{"": "v"}, "want 1 to 64 bytes", true},
		{"key with =", map[string]string{"a=b": "v"}, `'='`, true},
		{"control in value", map[string]string{"k": "a\nb"}, "control character", true},
		{"not utf-8", map[string]string{"k": "\xff"}, "not UTF-8", true},
		{"too many", many, "17 labels, at most 16", true},
	} {
		l, err := MakeLabels(tc.m)
		if tc.bad {
			if !errors.Is(err, ErrLabel) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: err = %v, want ErrLabel saying %q", tc.name, err, tc.want)
			}
			continue
		}
		if err != nil || l.String() != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, l.String(), err, tc.want)
		}
		if err := checkCanonical([]byte(l)); err != nil {
			t.Errorf("%s: not canonical: %v", tc.name, err)
		}
		if got := len(l.Map()); got != len(tc.m) {
			t.Errorf("%s: Map has %d labels, want %d", tc.name, got, len(tc.m))
		}
	}
}

func TestLabelsWithin(t *testing.T) {
	l := func(pairs ...string) Labels {
		x, err := ParseLabels(pairs)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	offer := l("gpu=a100", "repo=piloop", "zone=eu")
	for _, tc := range []struct {
		need Labels
		want bool
	}{
		{l(), true},
		{l("gpu=a100"), true},
		{l("zone=eu"), true},
		{l("gpu=a100", "repo=piloop", "zone=eu"), true},
		{l("gpu=h100"), false},               // another value
		{l("arch=arm"), false},               // a key before every offered one
		{l("zz=1"), false},                   // a key after every offered one
		{l("gpu=a100", "hostname=x"), false}, // one key missing between
		{l("gpu=a100", "zone=us"), false},    // the last differs
		{l("a=1", "gpu=a100"), false},        // the first missing
	} {
		if got := tc.need.Within(offer); got != tc.want {
			t.Errorf("%s within %s = %v, want %v", tc.need, offer, got, tc.want)
		}
	}
	if l("gpu=a100").Within("") {
		t.Error("a label required, none offered: within")
	}
	if v, ok := offer.Get("repo"); !ok || v != "piloop" {
		t.Errorf("Get(repo) = %q, %v", v, ok)
	}
	if _, ok := offer.Get("hostname"); ok {
		t.Error("Get(hostname) found a key not there")
	}
}

func TestParseLabels(t *testing.T) {
	if l, err := ParseLabels([]string{"k=a=b"}); err != nil || l.String() != "k=a=b" {
		t.Errorf("k=a=b: %q, %v; want the value a=b", l, err)
	}
	for _, bad := range [][]string{{"novalue"}, {"k=1", "k=2"}, {"=v"}} {
		if _, err := ParseLabels(bad); !errors.Is(err, ErrLabel) {
			t.Errorf("%q: err = %v, want ErrLabel", bad, err)
		}
	}
}

// TestDecodeLabelsCorrupt: a labels field that is not canonical is a
// corrupt record, naming its seq, never a panic or a set of labels that
// compares unequal to itself.
func TestDecodeLabelsCorrupt(t *testing.T) {
	base := Event{Seq: 9, Type: TypeQueued, Time: 1, Job: "j", Kind: KindRun}
	for _, tc := range []struct {
		name   string
		labels string
	}{
		{"truncated key", "\x05ab"},
		{"truncated value", "\x01k\x05ab"},
		{"unsorted", "\x01b\x011\x01a\x011"},
		{"duplicate", "\x01a\x011\x01a\x012"},
		{"bad key", "\x01=\x011"},
	} {
		e := base
		e.Labels = Labels(tc.labels)
		b := AppendRecord(nil, &e)
		if _, err := Decode(e.Seq, b); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "seq 9") {
			t.Errorf("%s: err = %v, want ErrCorrupt naming seq 9", tc.name, err)
		}
	}
}
