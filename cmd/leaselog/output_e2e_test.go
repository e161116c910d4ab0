package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
)

// A job may write in its run directory: one that makes its stdout a named
// pipe, another that makes its stderr a link to a file of the daemon's user
// (a configuration with tokens), must neither wedge the output route nor
// get that file shown. Each read is answered at once, 409 output_refused
// naming what is there — 50 at a time too, over HTTP/1.1 and over h2c,
// with max_connections = 30 — the API stays reachable, and `leaselog logs`,
// through the daemon or --workdir, fails saying why and shows nothing of
// the file. Every wait is bounded by a context's deadline: a read that
// hangs fails the test rather than hanging it.
func TestE2EOutputOfATamperedRun(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret.toml")
	const secret = "s3cret-token"
	if err := os.WriteFile(secretFile, []byte("token = \""+secret+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startServeConfig(t, dir, strings.Replace(config(1), "[server]\n", "[server]\nmax_connections = 30\n", 1))
	ev := d.follow(t, 0)
	submit(t, d.c, "piped", "run", "echo before; rm .leaselog/stdout && mkfifo .leaselog/stdout")
	submit(t, d.c, "linked", "run", "echo oops >&2; rm .leaselog/stderr && ln -s "+secretFile+" .leaselog/stderr")
	piped := ev.next("lease.reported", "piped").Lease
	linked := ev.next("lease.reported", "linked").Lease
	data, workdir := filepath.Join(dir, "data"), filepath.Join(dir, "data", "work")

	token, err := clientToken(d.url, data)
	if err != nil {
		t.Fatal(err)
	}
	h2c, err := api.NewClient(d.url, token, api.H2C())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A read of a job's stream, by one kind of client or another.
	type read func(job, stream string) error
	byClient := func(c *api.Client) read {
		return func(job, stream string) error {
			_, err := c.Output(ctx, job, api.OutputQuery{Stream: stream})
			return err
		}
	}
	// Connections of HTTP/1.1 not kept alive: those past max_connections
	// get the places of those answered.
	oneShot := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	byConnection := func(job, stream string) error {
		req, err := http.NewRequestWithContext(ctx, "GET", d.url+"/v1/jobs/"+job+"/output?stream="+stream, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := oneShot.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var eb api.ErrorBody
		if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil || eb.Error == nil {
			return fmt.Errorf("%d, not an error's body: %v", resp.StatusCode, err)
		}
		eb.Error.Status = resp.StatusCode
		return eb.Error
	}
	wantRefused := func(r read, job, stream, says string) error {
		err := r(job, stream)
		var e *api.Error
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("GET output of %s (%s): no answer: %w", job, stream, err)
		case !errors.As(err, &e) || e.Status != http.StatusConflict || e.Code != api.CodeOutputRefused || !strings.Contains(e.Message, says):
			return fmt.Errorf("GET output of %s (%s): %v; want 409 output_refused saying %q", job, stream, err, says)
		case strings.Contains(e.Message, secret):
			return fmt.Errorf("GET output of %s (%s) shows the linked file: %v", job, stream, err)
		}
		return nil
	}
	pipeSays := fmt.Sprintf("piped-%d/.leaselog/stdout is a named pipe, not a regular file", piped)
	linkSays := fmt.Sprintf("linked-%d/.leaselog/stderr is a symbolic link, not a regular file", linked)
	if err := wantRefused(byClient(d.c), "piped", "stdout", pipeSays); err != nil {
		t.Fatal(err)
	}
	if err := wantRefused(byClient(d.c), "linked", "stderr", linkSays); err != nil {
		t.Fatal(err)
	}
	// The streams the jobs left alone read as ever.
	if o, err := d.c.Output(ctx, "piped", api.OutputQuery{Stream: "stderr"}); err != nil || len(o.Data) != 0 {
		t.Fatalf("piped's stderr: %q, %v", o.Data, err)
	}

	// 50 readers at once: 50 connections, then 50 streams of one h2c
	// connection.
	for _, cl := range []struct {
		name string
		r    read
	}{{"HTTP/1.1", byConnection}, {"h2c", byClient(h2c)}} {
		var wg sync.WaitGroup
		errs := make(chan error, 50)
		for i := range 50 {
			wg.Go(func() {
				if i%2 == 0 {
					errs <- wantRefused(cl.r, "piped", "stdout", pipeSays)
				} else {
					errs <- wantRefused(cl.r, "linked", "stderr", linkSays)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("%s, 50 at once: %v", cl.name, err)
			}
		}
	}
	if _, err := d.c.Job(ctx, "piped"); err != nil {
		t.Fatalf("the API after the reads: %v", err)
	}

	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"piped", "--server", d.url, "--data", data}, "output_refused: lease " + fmt.Sprint(piped) + " of job piped: output refused: " + pipeSays},
		{[]string{"piped", "--workdir", workdir}, pipeSays},
		{[]string{"piped", "--workdir", workdir, "--follow"}, pipeSays},
		{[]string{"linked", "--stream", "stderr", "--server", d.url, "--data", data}, linkSays},
		{[]string{"linked", "--stream", "stderr", "--workdir", workdir}, linkSays},
	} {
		r := startLogs(t, tc.args...)
		code := r.wait(t)
		if code == 0 || !strings.Contains(r.stderr.String(), tc.says) {
			t.Errorf("logs %v: exit %d, stderr %q; want a failure saying %q", tc.args, code, r.stderr.String(), tc.says)
		}
		if strings.Contains(r.stdout.String()+r.stderr.String(), secret) {
			t.Errorf("logs %v shows the linked file: stdout %q, stderr %q", tc.args, r.stdout.String(), r.stderr.String())
		}
	}
}
