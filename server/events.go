package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/ops"
)

// streamFlushEvery bounds how many events an event stream writes between
// flushes (and write deadlines), so a long backlog reaches the client as it
// goes rather than at the end.
const streamFlushEvery = 256

// listEvents answers GET /v1/events?type=&job=&worker=&since=&until=&after=&limit=
// from the log's indexes: one page of events, and the cursor of the next
// (paging.go): the seq of the page's last event, as a number, absent on the
// last page.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request, c *call) error {
	p, err := params(r, "type", "job", "worker", "since", "until", "after", "limit")
	if err != nil {
		return err
	}
	q, err := eventQuery(p)
	if err != nil {
		return err
	}
	limit, err := pageLimit(p)
	if err != nil {
		return err
	}
	out, err := ops.Events(s.svc, q, limit)
	if err != nil {
		return err
	}
	s.writeJSON(w, c, http.StatusOK, out)
	return nil
}

// eventQuery parses the filters an events query and an event stream share:
// type, job, worker, since, until, after.
func eventQuery(p map[string]string) (lease.EventFilter, error) {
	var q lease.EventFilter
	if v := p["type"]; v != "" {
		t, err := event.ParseType(v)
		if err != nil {
			return q, badRequest("type %q: not an event type", v)
		}
		q.Type = t
	}
	if q.Job = p["job"]; q.Job != "" {
		if err := lease.CheckID("job", q.Job); err != nil {
			return q, err
		}
	}
	if q.Worker = p["worker"]; q.Worker != "" {
		if err := lease.CheckID("worker", q.Worker); err != nil {
			return q, err
		}
	}
	var err error
	if q.Since, err = parseTime("since", p["since"]); err != nil {
		return q, err
	}
	if q.Until, err = parseTime("until", p["until"]); err != nil {
		return q, err
	}
	if v := p["after"]; v != "" {
		if q.After, err = strconv.ParseUint(v, 10, 64); err != nil {
			return q, badRequest("after %q: want a sequence number (a non-negative integer)", v)
		}
	}
	return q, nil
}

// parseTime parses an RFC 3339 time into Unix nanoseconds; "" is 0 (no
// bound). Times an int64 of nanoseconds cannot hold are refused rather than
// wrapped around.
func parseTime(name, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, badRequest("%s %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", name, v)
	}
	if t.Year() < 1678 || t.Year() > 2261 {
		return 0, badRequest("%s %q: out of range", name, v)
	}
	return t.UnixNano(), nil
}

// stream answers GET /v1/events/stream?after=SEQ (and the filters of
// /v1/events but limit) with server-sent events: one per log event, in order,
// with id = seq and event = type, the event's JSON as data. A client resumes
// with Last-Event-ID, which wins over after=. Only durable events are sent:
// the stream reads them (lease.Service.Events), and waits for more on the
// log's durable mark (lease.Service.WaitDurable). Idle, it sleeps on that
// mark and wakes only for a keepalive comment every Options.StreamKeepalive
// (10 s by default: EventSource clients and proxies expect one within 15 s);
// its token may come as ?token= (streamauth.go); it ends when its client hangs up (net/http cancels the request's context),
// when a write fails, or when the server closes.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, c *call) error {
	if s.streamHook != nil {
		defer s.streamHook("end")
	}
	p, err := params(r, "type", "job", "worker", "since", "until", "after", tokenParam)
	if err != nil {
		return err
	}
	q, err := eventQuery(p)
	if err != nil {
		return err
	}
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		if q.After, err = strconv.ParseUint(v, 10, 64); err != nil {
			return badRequest("Last-Event-ID %q: want a sequence number", v)
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.base, cancel)() // Close ends the stream

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // proxies must not sit on the events
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil || r.Method == http.MethodHead {
		return nil // the client is gone, cannot stream, or asked for headers only
	}

	for {
		// Every durable event up to upper that matches the filters was read;
		// resuming past upper never misses one. A cursor at or past upper
		// reads nothing: there is nothing after it yet.
		n := 0
		var werr error
		upper, err := s.svc.Events(q, 0, func(e *event.Event) error {
			if n%streamFlushEvery == 0 {
				_ = rc.SetWriteDeadline(time.Now().Add(s.opts.RequestTimeout)) // not every writer has one
			}
			werr = writeEvent(w, ops.EventOf(e))
			q.After = e.Seq
			if n++; n%streamFlushEvery == 0 && werr == nil {
				werr = rc.Flush()
			}
			return werr
		})
		switch {
		case werr != nil:
			return nil // the client went away
		case err != nil:
			s.log.Error().Err(err).Str("route", c.route).Msg("event stream: read the log")
			return nil // the status line is out: ending the stream is all that is left
		}
		if n > 0 {
			if err := rc.Flush(); err != nil {
				return nil
			}
		}
		q.After = max(q.After, upper)
		if err := s.waitEvents(ctx, w, rc, q.After); err != nil {
			return nil // the client left, the server closed, or the log failed
		}
	}
}

// waitEvents returns once an event after seq is durable, writing a keepalive
// comment each time Options.StreamKeepalive passes without one. It returns an
// error when ctx ends, the log fails, or a keepalive cannot be written. After
// seq 2^64−1 no event can come: it waits for ctx alone.
func (s *Server) waitEvents(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, seq uint64) error {
	for {
		if s.streamHook != nil {
			s.streamHook("wait")
		}
		tick, stop := context.WithTimeout(ctx, s.opts.StreamKeepalive)
		var err error
		if seq == math.MaxUint64 {
			<-tick.Done()
		} else {
			err = s.svc.WaitDurable(tick, seq+1)
		}
		quiet := tick.Err() != nil
		stop()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil && seq != math.MaxUint64:
			return nil // an event came
		case !quiet:
			return err // the log failed
		}
		_ = rc.SetWriteDeadline(time.Now().Add(s.opts.RequestTimeout))
		if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil {
			return err
		}
		if err := rc.Flush(); err != nil {
			return err
		}
	}
}

// writeEvent writes one server-sent event. The JSON of an event has no raw
// newline, so it fits one data: line.
func writeEvent(w http.ResponseWriter, e api.Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("server: encode event %d: %w", e.Seq, err)
	}
	buf := make([]byte, 0, len(b)+64)
	buf = append(buf, "id: "...)
	buf = strconv.AppendUint(buf, e.Seq, 10)
	buf = append(buf, "\nevent: "...)
	buf = append(buf, e.Type...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	_, err = w.Write(buf)
	return err
}
