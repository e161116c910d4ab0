package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/projection"
)

// MaxSpecLen bounds a job spec.
const MaxSpecLen = 256 << 10

// Submit queues a new job, with the daemon's default cap on requeues if it
// is an evaluation: SubmitBatch with one item, its answer and error.
// Submission is idempotent on the id the executor chose: the same id with
// the same kind and spec returns the existing job (created false) and
// records nothing; with a different kind or spec it is refused with
// ErrJobExists. The spec must be a JSON object; it is stored in canonical
// form (keys sorted, no spaces), so two encodings of the same object are the
// same spec.
func (s *Service) Submit(ctx context.Context, id string, kind event.Kind, spec []byte) (projection.Job, bool, error) {
	return s.SubmitItem(ctx, SubmitItem{ID: id, Kind: kind, Spec: spec})
}

// SubmitItem is Submit of one item, which may name its cap on requeues.
func (s *Service) SubmitItem(ctx context.Context, it SubmitItem) (projection.Job, bool, error) {
	res, err := s.SubmitBatch(ctx, []SubmitItem{it})
	if err != nil {
		return projection.Job{}, false, err
	}
	return res[0].Job, res[0].Created, res[0].Err
}

// MaxRequeuesLimit bounds a cap on requeues (max_requeues): a larger one is
// a mistake, and no cap at all is 0.
const MaxRequeuesLimit = 1_000_000

// checkMaxRequeues checks the cap on requeues a submission names for a job
// of kind k. (Open checks the daemon's default.)
func checkMaxRequeues(n int, k event.Kind) error {
	switch {
	case n < 0 || n > MaxRequeuesLimit:
		return fmt.Errorf("%w: max_requeues %d: want 0 (no cap) to %d", ErrInvalid, n, MaxRequeuesLimit)
	case n != 0 && k == event.KindRun:
		return fmt.Errorf("%w: max_requeues %d on a run: a run is never queued again (a loss fails it), only an evaluation is", ErrInvalid, n)
	}
	return nil
}

func canonicalSpec(spec []byte) ([]byte, error) {
	if len(spec) > MaxSpecLen {
		return nil, fmt.Errorf("%w: spec of %d bytes exceeds %d", ErrInvalid, len(spec), MaxSpecLen)
	}
	if len(bytes.TrimSpace(spec)) == 0 {
		return []byte("{}"), nil
	}
	d := json.NewDecoder(bytes.NewReader(spec))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: spec: %v", ErrInvalid, err)
	}
	if d.More() {
		return nil, fmt.Errorf("%w: spec: trailing data after the object", ErrInvalid)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("%w: spec must be a JSON object", ErrInvalid)
	}
	return json.Marshal(v) // maps marshal with sorted keys
}

func compactJSON(b []byte) ([]byte, error) {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Cancel asks for job id to stop gracefully: a queued job is cancelled at
// once; a leased one is revoked, and its worker is told at its next heartbeat
// and still reports. A job that has ended is returned as it is.
func (s *Service) Cancel(ctx context.Context, id string) (projection.Job, error) {
	return s.revoke(ctx, id, event.RevokeCancel)
}

// Kill is Cancel that tells the worker to stop the job at once.
func (s *Service) Kill(ctx context.Context, id string) (projection.Job, error) {
	return s.revoke(ctx, id, event.RevokeKill)
}

func (s *Service) revoke(ctx context.Context, id string, mode event.RevokeMode) (projection.Job, error) {
	if err := CheckID("job", id); err != nil {
		return projection.Job{}, err
	}
	return command(ctx, s, mode.String(), func(t *tx) (projection.Job, error) {
		j, ok, err := s.jobLocked(id)
		if err != nil || !ok {
			if err == nil {
				err = fmt.Errorf("%w: job %q", ErrNotFound, id)
			}
			return j, err
		}
		var e event.Event
		switch {
		case j.State == fsm.Queued:
			reason := event.ReasonCancelled
			if mode == event.RevokeKill {
				reason = event.ReasonKilled
			}
			e = event.Event{Type: event.TypeCancelled, Job: id, Reason: reason}
		case j.State.Live():
			if l, _ := s.mu.table.Lease(j.Lease); l.Mode < mode {
				e = event.Event{Type: event.TypeRevoked, Job: id, Lease: l.ID, Worker: l.Worker, Mode: mode}
			}
		}
		if e.Type == 0 {
			return j, nil // ended, or revoked as hard already: a read
		}
		if _, err := t.stage(e); err != nil {
			return projection.Job{}, err
		}
		j, _, err = s.jobLocked(id) // a cancelled job is in the archive now
		if err != nil {
			return projection.Job{}, err
		}
		return j, nil
	})
}

// QueuePolicy says what a graceful stop does with the jobs still queued.
type QueuePolicy uint8

const (
	// CancelQueued cancels them ("daemon stopped"): the Leases page's rule,
	// and the default.
	CancelQueued QueuePolicy = iota
	// KeepQueued leaves them queued, in their order, for the workers of the
	// next start: a deploy or an upgrade loses nothing of the queue.
	KeepQueued
)

// Stop is the graceful stop of the daemon: every queued job is cancelled
// (reason "daemon stopped"), or with KeepQueued left queued, and
// daemon.stopping is recorded (with KeepQueued, reason "queued jobs kept").
// Leases in flight stay: their agents keep running, and their workers
// re-attach after the restart. After Stop, submissions and acquires are
// refused with ErrStopping, and waiting acquires return empty; a second
// Stop records nothing.
func (s *Service) Stop(ctx context.Context, queued QueuePolicy) error {
	_, err := command(ctx, s, "stop", func(t *tx) (struct{}, error) {
		if s.mu.stopping {
			t.noReadWait = true
			return struct{}{}, nil
		}
		s.mu.stopping = true
		var evs []event.Event
		stopping := event.Event{Type: event.TypeDaemonStopping}
		if queued == KeepQueued {
			stopping.Reason = event.ReasonQueueKept
		} else {
			for _, j := range s.mu.table.Queued(0) {
				evs = append(evs, event.Event{Type: event.TypeCancelled, Job: j.ID, Reason: event.ReasonDaemonStopped})
			}
		}
		_, err := t.stage(append(evs, stopping)...)
		s.wakeLocked() // every waiting acquire: it will find the daemon stopping
		return struct{}{}, err
	})
	return err
}

// CheckID checks a job or worker id: 1 to 128 bytes of letters, digits and
// . _ - : @, but not "." or "..", so that it is safe in a URL path, a log
// line and an index key.
func CheckID(what, id string) error {
	if id == "" {
		return fmt.Errorf("%w: missing %s id", ErrInvalid, what)
	}
	if len(id) > 128 {
		return fmt.Errorf("%w: %s id of %d bytes exceeds 128", ErrInvalid, what, len(id))
	}
	if id == "." || id == ".." { // a path segment clients and servers remove: /v1/jobs/.. is /v1/
		return fmt.Errorf("%w: %s id %q cannot be named in a URL path", ErrInvalid, what, id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':' || c == '@') {
			return fmt.Errorf("%w: %s id %q: %s is not an ASCII letter, digit or one of . _ - : @", ErrInvalid, what, id, charAt(id, i))
		}
	}
	return nil
}

// charAt names the character of s that starts at byte i, for a message:
// the character quoted, or the byte in hex where s is not UTF-8 (a byte
// quoted as a character would read as Latin-1: 'æ' for the first of 日).
func charAt(s string, i int) string {
	if r, n := utf8.DecodeRuneInString(s[i:]); r != utf8.RuneError || n > 1 {
		return fmt.Sprintf("%q at byte %d", r, i)
	}
	return fmt.Sprintf("byte 0x%02x at %d (not UTF-8)", s[i], i)
}
