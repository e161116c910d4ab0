package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/lease"
)

// OutputSource reads the output of the jobs the daemon's own worker ran.
// The daemon has no other: a remote worker keeps its jobs' output in its
// run directories, on its machine.
type OutputSource interface {
	// Worker is the id of the worker whose runs the source reads.
	Worker() string
	// Output reads at most max bytes of stream ("stdout" or "stderr") of the
	// run of lease of job from offset, and returns by the time ctx is done.
	// An error wrapping ErrNoOutput says the run is not there (never
	// started, or removed by retention); one wrapping ErrOutputRefused, that
	// the stream's file is not one the source reads.
	Output(ctx context.Context, job string, lease uint64, stream string, offset int64, max int) ([]byte, error)
}

// ErrNoOutput is the error of an OutputSource that has no run of a lease.
var ErrNoOutput = errors.New("no output")

// ErrOutputRefused is the error of an OutputSource that will not read a
// run's stream: the job, which may write in its run directory, left
// something else than a regular file there (a link to a file it should not
// show, a named pipe no read of which would end).
var ErrOutputRefused = errors.New("output refused")

// MaxOutputChunk bounds the bytes of one answer of GET /v1/jobs/{id}/output:
// a client reads a long output in chunks, by offset.
const MaxOutputChunk = 1 << 20

// The headers of an output answer: the lease whose run the bytes are of
// (0: the job has not had one), the offset to ask from next, and the job's
// state read before the bytes — a final state (reported, cancelled,
// failed) means the run's output was complete when read.
const (
	HeaderOutputLease = "Leaselog-Lease"
	HeaderOutputNext  = "Leaselog-Next-Offset"
	HeaderJobState    = "Leaselog-Job-State"
)

// output answers GET /v1/jobs/{id}/output?stream=&offset=&lease=: raw bytes
// of the job's output as the daemon's own worker wrote it, the latest lease
// by default.
func (s *Server) output(w http.ResponseWriter, r *http.Request, c *call) error {
	q, err := params(r, "stream", "offset", "lease")
	if err != nil {
		return err
	}
	if err := lease.CheckID("job", c.job); err != nil {
		return err
	}
	stream := q["stream"]
	switch stream {
	case "":
		stream = "stdout"
	case "stdout", "stderr":
	default:
		return badRequest("stream %q: want stdout or stderr", stream)
	}
	var offset int64
	if v := q["offset"]; v != "" {
		if offset, err = strconv.ParseInt(v, 10, 64); err != nil || offset < 0 {
			return badRequest("offset %q: want a byte offset, 0 or more", v)
		}
	}
	var leaseID uint64
	if v := q["lease"]; v != "" {
		if leaseID, err = strconv.ParseUint(v, 10, 64); err != nil || leaseID == 0 {
			return badRequest("lease %q: want a lease number, 1 or more", v)
		}
	}
	// The state first: read before the bytes, a final state means the bytes
	// are all there are.
	job, err := s.svc.Job(r.Context(), c.job)
	if err != nil {
		return err
	}
	if leaseID == 0 {
		leaseID = job.LastLease
	}
	h := w.Header()
	h.Set(HeaderJobState, job.State.String())
	if leaseID == 0 { // queued: no output yet
		h.Set(HeaderOutputLease, "0")
		h.Set(HeaderOutputNext, strconv.FormatInt(offset, 10))
		return writeOutput(w, nil)
	}
	l, err := s.svc.Lease(r.Context(), leaseID)
	if err != nil || l.Job != c.job {
		return &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound,
			Message: fmt.Sprintf("job %s has no lease %d", c.job, leaseID)}
	}
	src := s.opts.Output
	if src == nil || l.Worker != src.Worker() {
		return &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Message: fmt.Sprintf(
			"lease %d of job %s ran on worker %s: its output is in that worker's run directory, on its machine (there: leaselog logs %s --workdir DIR)",
			leaseID, c.job, l.Worker, c.job)}
	}
	b, err := src.Output(r.Context(), c.job, leaseID, stream, offset, MaxOutputChunk)
	switch {
	case errors.Is(err, ErrNoOutput):
		return &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound,
			Message: fmt.Sprintf("the run directory of lease %d of job %s is gone (removed after its retention?)", leaseID, c.job)}
	case errors.Is(err, ErrOutputRefused):
		// The run is there but in a state that cannot be served: a
		// conflict with the resource as it is, not a bad request.
		return &api.Error{Status: http.StatusConflict, Code: api.CodeOutputRefused,
			Message: fmt.Sprintf("lease %d of job %s: %v", leaseID, c.job, err)}
	case err != nil:
		return err // past the request's deadline: 503 (errorOf)
	}
	h.Set(HeaderOutputLease, strconv.FormatUint(leaseID, 10))
	h.Set(HeaderOutputNext, strconv.FormatInt(offset+int64(len(b)), 10))
	return writeOutput(w, b)
}

func writeOutput(w http.ResponseWriter, b []byte) error {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h["Cache-Control"] = noStore
	h["X-Content-Type-Options"] = noSniff
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b) // the client went away: nothing left to tell it
	return nil
}
