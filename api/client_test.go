package api_test

import (
	"testing"

	"github.com/leaselog/leaselog/api"
)

// TestNewClientToken: a blank token, or one with a line break inside, is
// refused with a message; a token read from a file keeps only its text.
func TestNewClientToken(t *testing.T) {
	for _, tc := range []struct {
		token string
		ok    bool
	}{
		{"", true}, // no token: an open daemon
		{"a-token-of-16-chars", true},
		{"a-token-of-16-chars\n", true}, // as read from a file
		{"   ", false},
		{"\t\n", false},
		{"a-token\nof-16-chars", false},
	} {
		_, err := api.NewClient("http://127.0.0.1:7420", tc.token)
		if (err == nil) != tc.ok {
			t.Errorf("NewClient(token %q): %v, want ok %v", tc.token, err, tc.ok)
		}
	}
}
