package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The event stream (GET /v1/events/stream) as a Go client reads it: Stream
// reads one connection, Follow reconnects, resuming with Last-Event-ID.

// ErrStreamEnded: the daemon ended a stream (it stopped or restarted, or
// the connection broke, or went silent past FollowOptions.Idle).
var ErrStreamEnded = errors.New("api: the event stream ended")

// Stream reads the events q selects (its Limit unused) from the stream,
// after q.After, calling each for every event in order, until ctx ends (nil)
// or the stream does (an error wrapping ErrStreamEnded), or each returns an
// error (returned as it is). It returns the seq of the last event passed to
// each (q.After if none): the cursor to resume from. A daemon that refuses
// the stream gives its *Error.
func (c *Client) Stream(ctx context.Context, q EventQuery, each func(Event) error) (uint64, error) {
	return c.stream(ctx, q, 0, func() {}, each)
}

// FollowOptions tune Follow. Zero values are the defaults.
type FollowOptions struct {
	// MinBackoff and MaxBackoff bound the wait before a reconnection: it
	// doubles from MinBackoff (default 100ms) with each failed attempt, up
	// to MaxBackoff (default 5s), with up to half of it random (jitter), so
	// that the followers of a restarted daemon do not come back together.
	MinBackoff, MaxBackoff time.Duration
	// Idle is how long the stream may send nothing, not even its keepalive
	// comment (every 10 s), before the connection is taken for dead (a cut
	// network sends no error) and replaced. Default 35s.
	Idle time.Duration
	// Retry, if set, is told each time the stream is lost and how long
	// Follow waits before connecting again.
	Retry func(err error, wait time.Duration)
	// Connected, if set, is told each time a stream is open.
	Connected func()
}

// Follow is Stream that does not end with the connection: when the stream
// is lost (the daemon restarted, the network broke) it connects again after
// a backoff and resumes with Last-Event-ID, the seq of the last event it
// passed, so that each sees every event once, in order. It ends when ctx
// does (nil), when each returns an error (that error), or when the daemon
// refuses the stream with a 4xx (a bad query or token: no retry mends it).
func (c *Client) Follow(ctx context.Context, q EventQuery, each func(Event) error, o FollowOptions) error {
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(5*time.Second, o.MinBackoff)
	}
	if o.Idle <= 0 {
		o.Idle = 35 * time.Second
	}
	backoff := o.MinBackoff
	for {
		connected := false
		last, err := c.stream(ctx, q, o.Idle, func() {
			connected = true
			if o.Connected != nil {
				o.Connected()
			}
		}, each)
		q.After = last
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			return nil
		case !errors.Is(err, ErrStreamEnded) && !retryable(err):
			return err
		}
		if connected {
			backoff = o.MinBackoff // it worked: the next loss starts afresh
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if o.Retry != nil {
			o.Retry(err, wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(2*backoff, o.MaxBackoff)
	}
}

// retryable: an error of the connection, or a 5xx (a daemon starting or
// failed), not a refusal of the request.
func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status >= 500 || e.Status == http.StatusTooManyRequests
	}
	return true // the transport's: connection refused, reset, a missing socket
}

// stream reads one connection of the stream; idle > 0 ends it when nothing
// comes for that long. open is called once the stream is open.
func (c *Client) stream(ctx context.Context, q EventQuery, idle time.Duration, open func(), each func(Event) error) (uint64, error) {
	last := q.After
	args := []string{"type", q.Type, "job", q.Job, "worker", q.Worker}
	if !q.Since.IsZero() {
		args = append(args, "since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		args = append(args, "until", q.Until.UTC().Format(time.RFC3339Nano))
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, c.base+"/v1/events/stream"+query(args...), nil)
	if err != nil {
		return last, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if q.After > 0 {
		// Last-Event-ID wins over after=, as EventSource sends it.
		req.Header.Set("Last-Event-ID", strconv.FormatUint(q.After, 10))
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return last, nil
		}
		return last, fmt.Errorf("api: event stream: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return last, streamRefused(resp)
	}
	open()
	var timer *time.Timer
	if idle > 0 {
		timer = time.AfterFunc(idle, cancel)
		defer timer.Stop()
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var data strings.Builder
	for sc.Scan() {
		if timer != nil {
			timer.Reset(idle)
		}
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() == 0 {
				continue
			}
			var e Event
			if err := json.Unmarshal([]byte(data.String()), &e); err != nil {
				return last, fmt.Errorf("api: event stream: event after %d: %w", last, err)
			}
			data.Reset()
			if err := each(e); err != nil {
				return last, err
			}
			last = e.Seq
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
		// id:, event: and comments (": keepalive") need nothing: the data
		// carries the seq and the type.
	}
	if ctx.Err() != nil {
		return last, nil
	}
	err = sc.Err()
	if err == nil {
		err = errors.New("the daemon closed it")
	}
	return last, fmt.Errorf("%w after seq %d: %v", ErrStreamEnded, last, err)
}

// streamRefused makes a refusal of the stream an *Error.
func streamRefused(resp *http.Response) error {
	b, _ := readAnswer(resp.Body, nil, 1<<20)
	var eb ErrorBody
	if json.Unmarshal(b, &eb) != nil || eb.Error == nil {
		return &Error{Status: resp.StatusCode, Code: CodeInternal, Message: strings.TrimSpace(string(b))}
	}
	eb.Error.Status = resp.StatusCode
	return eb.Error
}
