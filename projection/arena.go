package projection

import (
	"unsafe"

	"github.com/leaselog/leaselog/eventlog"
)

// arena hands out the memory the table keeps: job, lease and worker records in
// slabs, and copies of the strings and bytes events carry in chunks. A fold of
// a million events then costs a few hundred allocations, not millions. Nothing
// is ever freed: the table only grows, as the log does.
type arena struct {
	jobs    []job
	leases  []lease
	workers []worker
	chunk   []byte
}

const (
	slabLen   = 256
	chunkSize = 64 << 10
)

func (a *arena) newJob() *job {
	if len(a.jobs) == cap(a.jobs) {
		a.jobs = make([]job, 0, slabLen)
	}
	a.jobs = a.jobs[:len(a.jobs)+1]
	return &a.jobs[len(a.jobs)-1]
}

func (a *arena) newLease() *lease {
	if len(a.leases) == cap(a.leases) {
		a.leases = make([]lease, 0, slabLen)
	}
	a.leases = a.leases[:len(a.leases)+1]
	return &a.leases[len(a.leases)-1]
}

func (a *arena) newWorker() *worker {
	if len(a.workers) == cap(a.workers) {
		a.workers = make([]worker, 0, 16)
	}
	a.workers = a.workers[:len(a.workers)+1]
	return &a.workers[len(a.workers)-1]
}

// bytes returns a copy of b that the arena owns; nil for an empty b.
func (a *arena) bytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	if len(b) > chunkSize/8 {
		return append([]byte(nil), b...)
	}
	if len(a.chunk)+len(b) > cap(a.chunk) {
		a.chunk = make([]byte, 0, chunkSize)
	}
	start := len(a.chunk)
	a.chunk = append(a.chunk, b...)
	return a.chunk[start:len(a.chunk):len(a.chunk)]
}

func (a *arena) str(s string) string {
	if s == "" {
		return ""
	}
	if len(s) > chunkSize/8 {
		return string([]byte(s))
	}
	if len(a.chunk)+len(s) > cap(a.chunk) {
		a.chunk = make([]byte, 0, chunkSize)
	}
	start := len(a.chunk)
	a.chunk = append(a.chunk, s...)
	return unsafeString(a.chunk[start:len(a.chunk)])
}

// reason copies s, except for the reasons the daemon gives, which repeat on
// every expiry and are kept once.
func (a *arena) reason(s string) string {
	switch s {
	case eventlog.ReasonWorkerLost:
		return eventlog.ReasonWorkerLost
	case eventlog.ReasonLeaseExpired:
		return eventlog.ReasonLeaseExpired
	case eventlog.ReasonRevokedLost:
		return eventlog.ReasonRevokedLost
	case eventlog.ReasonDaemonStopped:
		return eventlog.ReasonDaemonStopped
	case eventlog.ReasonCancelled:
		return eventlog.ReasonCancelled
	case eventlog.ReasonKilled:
		return eventlog.ReasonKilled
	}
	return a.str(s)
}

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
