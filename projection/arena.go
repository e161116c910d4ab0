package projection

import (
	"strings"
	"unsafe"

	"github.com/leaselog/leaselog/event"
)

// arena hands out the table's job, lease and worker records from slabs, and
// takes back those of retired jobs for reuse, so that a fold of a million
// events costs a few hundred allocations, not millions, and the memory the
// table holds follows what is live. Strings and bytes are copied one
// allocation per job (its id and spec together), never into shared chunks:
// a chunk would stay alive as long as the longest-lived job in it.
type arena struct {
	jobs       []job
	leases     []lease
	workers    []worker
	freeJobs   []*job
	freeLeases []*lease
}

const slabLen = 256

func (a *arena) newJob() *job {
	if n := len(a.freeJobs); n > 0 {
		j := a.freeJobs[n-1]
		a.freeJobs = a.freeJobs[:n-1]
		return j
	}
	if len(a.jobs) == cap(a.jobs) {
		a.jobs = make([]job, 0, slabLen)
	}
	a.jobs = a.jobs[:len(a.jobs)+1]
	return &a.jobs[len(a.jobs)-1]
}

func (a *arena) freeJob(j *job) {
	*j = job{}
	a.freeJobs = append(a.freeJobs, j)
}

func (a *arena) newLease() *lease {
	if n := len(a.freeLeases); n > 0 {
		l := a.freeLeases[n-1]
		a.freeLeases = a.freeLeases[:n-1]
		return l
	}
	if len(a.leases) == cap(a.leases) {
		a.leases = make([]lease, 0, slabLen)
	}
	a.leases = a.leases[:len(a.leases)+1]
	return &a.leases[len(a.leases)-1]
}

func (a *arena) freeLease(l *lease) {
	*l = lease{}
	a.freeLeases = append(a.freeLeases, l)
}

func (a *arena) newWorker() *worker {
	if len(a.workers) == cap(a.workers) {
		a.workers = make([]worker, 0, 16)
	}
	a.workers = a.workers[:len(a.workers)+1]
	return &a.workers[len(a.workers)-1]
}

// idAndBytes copies id and b in one allocation; b's copy is nil if b is empty.
func (a *arena) idAndBytes(id string, b []byte) (string, []byte) {
	buf := make([]byte, len(id)+len(b))
	copy(buf, id)
	copy(buf[len(id):], b)
	if len(b) == 0 {
		return unsafeString(buf), nil
	}
	return unsafeString(buf[:len(id)]), buf[len(id):len(buf):len(buf)]
}

func (a *arena) str(s string) string { return strings.Clone(s) }

// reason copies s, except for the reasons the daemon gives, which repeat on
// every expiry and are kept once.
func (a *arena) reason(s string) string {
	switch s {
	case event.ReasonWorkerLost:
		return event.ReasonWorkerLost
	case event.ReasonLeaseExpired:
		return event.ReasonLeaseExpired
	case event.ReasonRevokedLost:
		return event.ReasonRevokedLost
	case event.ReasonDaemonStopped:
		return event.ReasonDaemonStopped
	case event.ReasonCancelled:
		return event.ReasonCancelled
	case event.ReasonKilled:
		return event.ReasonKilled
	}
	return a.str(s)
}

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
