package api

import "time"

// Worker is a worker as GET /v1/workers shows it: whether it is reachable
// (heard within grace_seconds while it held a live lease, or heard again
// since), when it last spoke, and how many live leases it holds.
type Worker struct {
	ID         string    `json:"id"`
	Reachable  bool      `json:"reachable"`
	Seen       time.Time `json:"seen"`
	LiveLeases int       `json:"live_leases"`
}

// Workers is the answer to GET /v1/workers: one page of the workers the
// daemon knows, by id, and the daemon's timing, by which a worker is judged
// unreachable (grace) and its leases expire (toleration). Next is the cursor
// of the next page, absent on the last.
type Workers struct {
	Workers []Worker `json:"workers"`
	Next    string   `json:"next,omitempty"`
	Timing
}
