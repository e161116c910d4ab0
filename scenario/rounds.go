package scenario

import (
	"fmt"
	"strings"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
)

// writeGrants prints grants, one a line, each after prefix: its lease, its
// job, and the job's state when it came running.
func writeGrants(b *strings.Builder, prefix string, gs []lease.Grant) {
	for _, g := range gs {
		fmt.Fprintf(b, "%slease %d job=%s", prefix, g.Lease, g.Job.ID)
		if g.Job.State.String() == "running" {
			b.WriteString(" running")
		}
		b.WriteByte('\n')
	}
}

// batchItems reads the items of submit-batch, one a line: an id, a kind,
// and the spec (the rest of the line; none is {}).
func batchItems(input string) ([]lease.SubmitItem, error) {
	var items []lease.SubmitItem
	for _, line := range strings.Split(input, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.SplitN(line, " ", 3)
		if len(f) < 2 {
			return nil, fmt.Errorf("%w: submit-batch: %q: want: id kind [spec]", ErrScript, line)
		}
		kind, err := event.ParseKind(f[1])
		if err != nil {
			kind = 0 // the service refuses it, as it would an unknown kind on the wire
		}
		it := lease.SubmitItem{ID: f[0], Kind: kind}
		if len(f) == 3 {
			it.Spec = []byte(f[2])
		}
		items = append(items, it)
	}
	return items, nil
}
