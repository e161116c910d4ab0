package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/projection"
)

// The table holds what is live; a job that ended, with its leases and the
// stale reports on them, is in the log's archive, written in the batch of
// the event that ended it (projection.RetireRecord). Every question about a
// job or lease asks the table first and the archive second. A record is
// visible as soon as its batch is staged, that is before the table moves
// past its event, so a lookup made after the table's answer never misses a
// job that ended in between; answers wait, as always, until what they read
// is durable.

// archived reads the archive record under key and decodes it; what names it
// in errors.
func archived[T any](s *Service, key []byte, what string, decode func([]byte) (T, error)) (T, bool, error) {
	var zero T
	b, err := s.log.Archived(key)
	if errors.Is(err, eventlog.ErrNotFound) {
		return zero, false, nil
	}
	if err != nil {
		return zero, false, fmt.Errorf("lease: %s: %w", what, err)
	}
	v, err := decode(b)
	if err != nil {
		return zero, false, fmt.Errorf("lease: archive key %q: %w", key, err)
	}
	return v, true, nil
}

func (s *Service) archivedJob(id string) (projection.Job, bool, error) {
	return archived(s, projection.ArchiveJobKey(id), fmt.Sprintf("job %q", id),
		func(b []byte) (projection.Job, error) { return projection.DecodeJob(id, b) })
}

func (s *Service) archivedLease(id uint64) (projection.Lease, bool, error) {
	return archived(s, projection.ArchiveLeaseKey(id), fmt.Sprintf("lease %d", id),
		func(b []byte) (projection.Lease, error) { return projection.DecodeLease(id, b) })
}

func (s *Service) archivedStale(k projection.StaleKey) (uint64, bool, error) {
	return archived(s, projection.ArchiveStaleKey(k), fmt.Sprintf("stale report %x", k), projection.DecodeStale)
}

// jobLocked returns job id from the table or the archive.
func (s *Service) jobLocked(id string) (projection.Job, bool, error) {
	if j, ok := s.mu.table.Job(id); ok {
		return j, true, nil
	}
	j, ok, err := s.archivedJob(id)
	return j, ok, s.readFailedLocked(err)
}

// leaseLocked returns lease id from the table or the archive.
func (s *Service) leaseLocked(id uint64) (projection.Lease, bool, error) {
	if l, ok := s.mu.table.Lease(id); ok {
		return l, true, nil
	}
	l, ok, err := s.archivedLease(id)
	return l, ok, s.readFailedLocked(err)
}

// staleLocked looks up the stale report fingerprinted k.
func (s *Service) staleLocked(k projection.StaleKey) (uint64, bool, error) {
	seq, ok, err := s.archivedStale(k)
	return seq, ok, s.readFailedLocked(err)
}

// readFailedLocked fails the service if err says the log failed or closed
// under it, as a write would, so that a decision that needed the archive is
// refused with ErrFailed like every other.
func (s *Service) readFailedLocked(err error) error {
	if logFailure(err) {
		s.failLocked(err, "archive read")
		return s.mu.err
	}
	return err
}

// JobView is a job with its live lease, if it has one. Of a queued job, it
// tells whether a worker present takes its kind and offers its labels
// (Takeable), and, if it is not about to be granted, what it waits for:
// WaitingForTime or WaitingForWorker (see schedule.go).
type JobView struct {
	projection.Job
	Live       *projection.Lease
	Takeable   bool
	WaitingFor string
}

// Job returns job id.
func (s *Service) Job(ctx context.Context, id string) (projection.Job, error) {
	v, err := s.JobView(ctx, id)
	return v.Job, err
}

// JobView returns job id, with its live lease if it has one.
func (s *Service) JobView(ctx context.Context, id string) (JobView, error) {
	var v JobView
	ok := false
	if err := s.read(ctx, func(t *projection.Table) {
		var j projection.Job
		if j, ok = t.Job(id); ok {
			sv := scheduleView{s: s}
			v = sv.view(j)
		}
	}); err != nil || ok {
		return v, err
	}
	j, ok, err := s.archivedJob(id)
	if err != nil {
		return v, err
	}
	if !ok {
		return v, fmt.Errorf("%w: job %q", ErrNotFound, id)
	}
	return JobView{Job: j}, s.waitDurable(ctx, s.log.LastSeq())
}

// Lease returns lease id.
func (s *Service) Lease(ctx context.Context, id uint64) (projection.Lease, error) {
	var l projection.Lease
	ok := false
	if err := s.read(ctx, func(t *projection.Table) { l, ok = t.Lease(id) }); err != nil || ok {
		return l, err
	}
	l, ok, err := s.archivedLease(id)
	if err != nil {
		return l, err
	}
	if !ok {
		return l, fmt.Errorf("%w: lease %d", ErrNotFound, id)
	}
	return l, s.waitDurable(ctx, s.log.LastSeq())
}

// Jobs returns the jobs f selects, by id.
func (s *Service) Jobs(ctx context.Context, f projection.JobFilter) ([]projection.Job, error) {
	vs, err := s.JobViews(ctx, f)
	js := make([]projection.Job, len(vs))
	for i, v := range vs {
		js[i] = v.Job
	}
	return js, err
}

// JobViews returns the jobs f selects, by id, each with its live lease. Jobs
// that ended are read from the archive, after the table: a job that ends in
// between is listed once, as it ended.
func (s *Service) JobViews(ctx context.Context, f projection.JobFilter) ([]JobView, error) {
	var vs []JobView
	if err := s.read(ctx, func(t *projection.Table) {
		sv := scheduleView{s: s}
		for _, j := range t.Jobs(f) {
			vs = append(vs, sv.view(j))
		}
	}); err != nil {
		return nil, err
	}
	if f.State != fsm.None && !f.State.Terminal() {
		return vs, nil
	}
	at := make(map[string]int, len(vs))
	for i, v := range vs {
		at[v.ID] = i
	}
	err := s.log.ScanArchive(projection.ArchiveJobs, func(key, value []byte) error {
		id, _, _ := projection.ParseArchiveKey(key)
		j, err := projection.DecodeJob(id, value)
		if err != nil {
			return fmt.Errorf("lease: archive key %q: %w", key, err)
		}
		if !f.Selects(j) {
			return nil
		}
		if i, ok := at[id]; ok {
			vs[i] = JobView{Job: j}
		} else {
			vs = append(vs, JobView{Job: j})
		}
		return nil
	})
	if err != nil {
		return nil, s.logErr(err, "archive scan")
	}
	slices.SortFunc(vs, func(a, b JobView) int { return cmp.Compare(a.ID, b.ID) })
	return vs, s.waitDurable(ctx, s.log.LastSeq())
}

// Leases returns the leases f selects, by token: live ones when f.State is
// unset; ended ones from the table (expired leases of evaluations still
// queued) and the archive.
func (s *Service) Leases(ctx context.Context, f projection.LeaseFilter) ([]projection.Lease, error) {
	var ls []projection.Lease
	if err := s.read(ctx, func(t *projection.Table) { ls = t.Leases(f) }); err != nil {
		return nil, err
	}
	if f.State == fsm.None || f.State.Live() {
		return ls, nil
	}
	at := make(map[uint64]int, len(ls))
	for i, l := range ls {
		at[l.ID] = i
	}
	err := s.log.ScanArchive(projection.ArchiveLeases, func(key, value []byte) error {
		l, err := archivedLease(key, value)
		if err != nil {
			return err
		}
		if !f.Selects(l) {
			return nil
		}
		if i, ok := at[l.ID]; ok {
			ls[i] = l
		} else {
			ls = append(ls, l)
		}
		return nil
	})
	if err != nil {
		return nil, s.logErr(err, "archive scan")
	}
	slices.SortFunc(ls, func(a, b projection.Lease) int { return cmp.Compare(a.ID, b.ID) })
	return ls, s.waitDurable(ctx, s.log.LastSeq())
}

// archivedLease decodes a lease's archive record, naming its key if it is
// not one.
func archivedLease(key, value []byte) (projection.Lease, error) {
	_, id, ok := projection.ParseArchiveKey(key)
	if !ok {
		return projection.Lease{}, fmt.Errorf("lease: archive key %q: %w", key, projection.ErrArchive)
	}
	l, err := projection.DecodeLease(id, value)
	if err != nil {
		return projection.Lease{}, fmt.Errorf("lease: archive key %x: %w", key, err)
	}
	return l, nil
}
