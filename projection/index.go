package projection

import (
	"strings"

	"github.com/google/btree"

	"github.com/leaselog/leaselog/fsm"
)

// byID keeps the jobs the table holds in id order, one ordered set per
// state, so that a page of jobs (JobsAfter) seeks to its cursor and walks
// only as far as its page, whatever the table holds: a page of queued jobs
// walks queued jobs only, and a page of any state merges the few sets. The
// fold keeps it as a job changes state (setState) and leaves (retire).
// A set that empties keeps its root node (google/btree's does), so that a
// job's life costs the sets no allocation once they have grown.
type byID [fsm.NumStates]*btree.BTreeG[*job]

// degree is the sets' B-tree degree: nodes of up to 2*degree-1 jobs.
const degree = 32

func (x *byID) add(j *job) {
	s := x[j.state]
	if s == nil {
		s = btree.NewG(degree, func(a, b *job) bool { return a.id < b.id })
		x[j.state] = s
	}
	s.ReplaceOrInsert(j)
}

func (x *byID) remove(j *job) {
	if s := x[j.state]; s != nil {
		s.Delete(j)
	}
}

// ascend calls fn, in id order, with the jobs of state s whose id is
// greater than after and starts with prefix, until fn returns false.
func (x *byID) ascend(s fsm.State, after, prefix string, fn func(*job) bool) {
	set := x[s]
	if set == nil || set.Len() == 0 {
		return
	}
	// The ids that start with prefix are those from prefix up to the first
	// that does not.
	set.AscendGreaterOrEqual(&job{id: max(after, prefix)}, func(j *job) bool {
		if j.id == after {
			return true
		}
		return strings.HasPrefix(j.id, prefix) && fn(j)
	})
}

// ascendIDs is ascend over an ordered set of ids.
func ascendIDs(set *btree.BTreeG[string], after, prefix string, fn func(string) bool) {
	if set == nil {
		return
	}
	set.AscendGreaterOrEqual(max(after, prefix), func(id string) bool {
		if id == after {
			return true
		}
		return strings.HasPrefix(id, prefix) && fn(id)
	})
}
