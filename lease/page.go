package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/projection"
)

// Paged reads: the lists of the API, a page at a time. Each takes the cursor
// of the previous page (the last id or token it returned) and a limit, and
// returns up to limit items after the cursor, in order, and whether more
// follow. A page reads the table (what is live, held in memory: jobs from
// its index by id, seeked to the cursor; leases walked in token order) and
// seeks the archive (what ended, which grows without bound) to the cursor,
// so a page of jobs costs the page, and no page costs the history before it.
// Like the whole-list reads, they read the table first and the archive
// second: an item that ends in between is listed once, as it ended.

// errPageFull stops an archive scan once a page (and one more) is read.
var errPageFull = errors.New("lease: page full")

// JobPage returns, by id, up to limit of the jobs f selects whose id sorts
// after after ("" is the start), each with its live lease, and whether more
// follow. limit must be positive.
func (s *Service) JobPage(ctx context.Context, f projection.JobFilter, after string, limit int) ([]JobView, bool, error) {
	var vs []JobView
	if err := s.read(ctx, func(t *projection.Table) {
		sv := scheduleView{s: s}
		for _, j := range t.JobsAfter(f, after, limit+1) {
			vs = append(vs, sv.view(j))
		}
	}); err != nil {
		return nil, false, err
	}
	if f.State != fsm.None && !f.State.Terminal() {
		vs, more := cut(vs, limit)
		return vs, more, nil
	}
	var from []byte
	if after != "" {
		from = append(projection.ArchiveJobKey(after), 0) // the first key past after's
	}
	if f.Prefix > after { // ids with the prefix sort from it on
		from = projection.ArchiveJobKey(f.Prefix)
	}
	var ended []JobView
	err := s.log.ScanArchiveFrom(projection.ArchiveJobs, from, func(key, value []byte) error {
		id, _, _ := projection.ParseArchiveKey(key)
		if !strings.HasPrefix(id, f.Prefix) { // past the ids with the prefix: none follows
			return errPageFull
		}
		j, err := projection.DecodeJob(id, value)
		if err != nil {
			return fmt.Errorf("lease: archive key %q: %w", key, err)
		}
		if !f.Selects(j) {
			return nil
		}
		if ended = append(ended, JobView{Job: j}); len(ended) > limit {
			return errPageFull
		}
		return nil
	})
	if err != nil && !errors.Is(err, errPageFull) {
		return nil, false, s.logErr(err, "archive scan")
	}
	vs = mergePage(vs, ended, func(v JobView) string { return v.ID })
	vs, more := cut(vs, limit)
	return vs, more, s.waitDurable(ctx, s.log.LastSeq())
}

// LeasePage returns, by token, up to limit of the leases f selects whose
// token is greater than after, and whether more follow: live ones when
// f.State is unset; ended ones from the table and the archive. limit must be
// positive.
func (s *Service) LeasePage(ctx context.Context, f projection.LeaseFilter, after uint64, limit int) ([]projection.Lease, bool, error) {
	var ls []projection.Lease
	if err := s.read(ctx, func(t *projection.Table) { ls = t.LeasesAfter(f, after, limit+1) }); err != nil {
		return nil, false, err
	}
	if f.State == fsm.None || f.State.Live() {
		ls, more := cut(ls, limit)
		return ls, more, nil
	}
	if after == math.MaxUint64 {
		return nil, false, nil // no token is greater
	}
	var ended []projection.Lease
	from := projection.ArchiveLeaseKey(after + 1)
	err := s.log.ScanArchiveFrom(projection.ArchiveLeases, from, func(key, value []byte) error {
		l, err := archivedLease(key, value)
		if err != nil {
			return err
		}
		if !f.Selects(l) {
			return nil
		}
		if ended = append(ended, l); len(ended) > limit {
			return errPageFull
		}
		return nil
	})
	if err != nil && !errors.Is(err, errPageFull) {
		return nil, false, s.logErr(err, "archive scan")
	}
	ls = mergePage(ls, ended, func(l projection.Lease) uint64 { return l.ID })
	ls, more := cut(ls, limit)
	return ls, more, s.waitDurable(ctx, s.log.LastSeq())
}

// WorkerPage returns, by token, up to limit of the live leases worker holds
// whose token is greater than after, each as its job with the lease (Live,
// never nil), and whether more follow. limit must be positive.
func (s *Service) WorkerPage(ctx context.Context, worker string, after uint64, limit int) ([]JobView, bool, error) {
	if err := CheckID("worker", worker); err != nil {
		return nil, false, err
	}
	var vs []JobView
	err := s.read(ctx, func(t *projection.Table) {
		for _, l := range t.LeasesAfter(projection.LeaseFilter{Worker: worker}, after, limit+1) {
			j, _ := t.Job(l.Job)
			vs = append(vs, JobView{Job: j, Live: &l})
		}
	})
	vs, more := cut(vs, limit)
	return vs, more, err
}

// mergePage merges two lists sorted by key: one read from the table, one
// from the archive. An item in both ended between the two reads: the
// archive's, read second, is the newer and wins.
func mergePage[T any, K cmp.Ordered](table, archive []T, key func(T) K) []T {
	if len(archive) == 0 {
		return table
	}
	out := make([]T, 0, len(table)+len(archive))
	i, j := 0, 0
	for i < len(table) || j < len(archive) {
		switch {
		case j == len(archive) || (i < len(table) && key(table[i]) < key(archive[j])):
			out = append(out, table[i])
			i++
		case i == len(table) || key(archive[j]) < key(table[i]):
			out = append(out, archive[j])
			j++
		default: // the same item
			out = append(out, archive[j])
			i++
			j++
		}
	}
	return out
}

// cut returns the first limit of vs and whether there were more.
func cut[T any](vs []T, limit int) ([]T, bool) {
	if len(vs) > limit {
		return slices.Clip(vs[:limit]), true
	}
	return vs, false
}
