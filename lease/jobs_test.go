package lease_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/lease"
)

// TestCheckID: an id refused for a character names that character as it
// is written — a character of several bytes whole, a byte that is not UTF-8
// in hex — and the byte it starts at.
func TestCheckID(t *testing.T) {
	for _, tc := range []struct {
		id, want string // want: "" for a valid id
	}{
		{"j1", ""},
		{"a.b_c-d:e@f", ""},
		{strings.Repeat("x", 128), ""},
		{"", `missing job id`},
		{strings.Repeat("x", 129), `job id of 129 bytes exceeds 128`},
		{"..", `job id ".." cannot be named in a URL path`},
		{"has/slash", `job id "has/slash": '/' at byte 3 is not an ASCII letter, digit or one of . _ - : @`},
		{"a b", `job id "a b": ' ' at byte 1 is not an ASCII letter`},
		{"日本", `job id "日本": '日' at byte 0 is not an ASCII letter`},
		{"jé", `job id "jé": 'é' at byte 1 is not an ASCII letter`},
		{"j🙂", `job id "j🙂": '🙂' at byte 1 is not an ASCII letter`},
		{"j\x00", `job id "j\x00": '\x00' at byte 1 is not an ASCII letter`},
		{"j\xe6", `job id "j\xe6": byte 0xe6 at 1 (not UTF-8) is not an ASCII letter`},
		{"j\xe6\x97", `job id "j\xe6\x97": byte 0xe6 at 1 (not UTF-8) is not an ASCII letter`}, // 日 cut short
		{"j\xef\xbf\xbd", `job id "j�": '�' at byte 1 is not an ASCII letter`},                 // U+FFFD itself is UTF-8
	} {
		err := lease.CheckID("job", tc.id)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckID(%q): %v", tc.id, err)
		case tc.want == "":
		case !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), tc.want):
			t.Errorf("CheckID(%q): %v, want ErrInvalid saying %s", tc.id, err, tc.want)
		}
	}
}
