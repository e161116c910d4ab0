package ops

import (
	"encoding/base64"
	"strconv"

	"github.com/leaselog/leaselog/lease"
)

// The cursors of the lists: a page's next names its last item — a job or a
// worker by id, a lease by token, an event by seq — so that a page never
// repeats or skips an item that existed when the first page was read. A
// client passes a next back as it came (as the list's after); each list
// parses its own and refuses one that is not, naming the parameter.

// JobCursor is the cursor after job (or worker) id: its id,
// base64url-encoded, so that it is one opaque URL-safe token whatever the
// id holds.
func JobCursor(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

// ParseJobCursor parses the after of a list by id; "" is the start.
func ParseJobCursor(after string) (string, error) {
	if after == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(after)
	if err != nil || lease.CheckID("job", string(b)) != nil {
		return "", badRequest("after %q: not a cursor of this list (pass a next back as it came)", after)
	}
	return string(b), nil
}

// NumCursor is the cursor after a lease token or an event seq.
func NumCursor(n uint64) string { return strconv.FormatUint(n, 10) }

// ParseNumCursor parses the after of a list by token or seq; "" is 0, the
// start.
func ParseNumCursor(after string) (uint64, error) {
	if after == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(after, 10, 64)
	if err != nil {
		return 0, badRequest("after %q: not a cursor of this list (pass a next back as it came)", after)
	}
	return n, nil
}
