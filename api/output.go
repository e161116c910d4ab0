package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// OutputQuery selects part of a job's output (GET /v1/jobs/{id}/output).
type OutputQuery struct {
	Stream string // "stdout" (the default) or "stderr"
	Offset int64  // the byte to read from
	Lease  uint64 // the lease whose run to read; 0: the job's latest
}

// Output is a chunk of a job's output as the daemon's own worker wrote it.
type Output struct {
	Data []byte
	// Lease is the lease whose run the bytes are of; 0 when the job has not
	// had one yet.
	Lease uint64
	// Next is the offset to ask from next.
	Next int64
	// JobState is the job's state, read before the bytes: a final one
	// (FinalState) means they were all there is.
	JobState string
}

// FinalState reports whether no event can move a job out of state: its
// output, if any, is complete.
func FinalState(state string) bool {
	return state == "reported" || state == "cancelled" || state == "failed"
}

// Output reads a chunk of a job's output. The daemon keeps the output of
// the jobs its own worker ran; a job that ran on another worker is refused
// (not_found, the message names the worker).
func (c *Client) Output(ctx context.Context, job string, q OutputQuery) (Output, error) {
	v := url.Values{}
	if q.Stream != "" {
		v.Set("stream", q.Stream)
	}
	if q.Offset != 0 {
		v.Set("offset", strconv.FormatInt(q.Offset, 10))
	}
	if q.Lease != 0 {
		v.Set("lease", strconv.FormatUint(q.Lease, 10))
	}
	path := "/v1/jobs/" + url.PathEscape(job) + "/output"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return Output{}, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Output{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return Output{}, err
	}
	if resp.StatusCode != http.StatusOK {
		var eb ErrorBody
		if json.Unmarshal(b, &eb) != nil || eb.Error == nil {
			return Output{}, &Error{Status: resp.StatusCode, Code: CodeInternal, Message: strings.TrimSpace(string(b))}
		}
		eb.Error.Status = resp.StatusCode
		return Output{}, eb.Error
	}
	out := Output{Data: b, JobState: resp.Header.Get("Leaselog-Job-State")}
	if out.Lease, err = strconv.ParseUint(resp.Header.Get("Leaselog-Lease"), 10, 64); err == nil {
		out.Next, err = strconv.ParseInt(resp.Header.Get("Leaselog-Next-Offset"), 10, 64)
	}
	if err != nil {
		return Output{}, fmt.Errorf("api: GET %s: bad output headers: %w", path, err)
	}
	return out, nil
}
