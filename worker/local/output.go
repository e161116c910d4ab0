package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/leaselog/leaselog/worker/local/supervise"
)

// Streams names the output files of a run a reader may ask for.
var Streams = []string{stdoutFile, stderrFile}

// ErrNoRun is the error of a job or lease with no run directory under the
// root: it never ran here, or retention removed it.
var ErrNoRun = errors.New("no run directory")

// Dir is the root of this executor's run directories (absolute).
func (e *Executor) Dir() string { return e.dir }

// FindRun returns the run directory of a job under root and its lease: the
// lease given, or with lease 0 the highest lease of the job found there. A
// run directory is <job>-<lease>; job ids may hold '-', but a lease is
// digits only, so "a-1-5" is job "a-1" and never job "a".
func FindRun(root, job string, lease uint64) (string, uint64, error) {
	if err := checkJobID(job); err != nil {
		return "", 0, err
	}
	if lease != 0 {
		dir := filepath.Join(root, job+"-"+strconv.FormatUint(lease, 10))
		if !fileExists(filepath.Join(dir, stateDir)) {
			return "", 0, fmt.Errorf("job %s, lease %d: %w in %s", job, lease, ErrNoRun, root)
		}
		return dir, lease, nil
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return "", 0, fmt.Errorf("job %s: %w", job, err)
	}
	var best uint64
	for _, ent := range ents {
		if l, ok := leaseOfDir(ent.Name(), job); ok && ent.IsDir() && l > best {
			best = l
		}
	}
	if best == 0 {
		return "", 0, fmt.Errorf("job %s: %w in %s", job, ErrNoRun, root)
	}
	return filepath.Join(root, job+"-"+strconv.FormatUint(best, 10)), best, nil
}

// leaseOfDir parses a run directory's name <job>-<lease>; with job "" any
// job's.
func leaseOfDir(name, job string) (uint64, bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 || (job != "" && name[:i] != job) {
		return 0, false
	}
	digits := name[i+1:]
	if digits == "" || digits[0] == '0' || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	l, err := strconv.ParseUint(digits, 10, 64)
	return l, err == nil
}

// ReadOutput reads at most max bytes of a run's stream ("stdout" or
// "stderr") from offset. A run whose command has not written yet has an
// empty stream, not a missing one. dir is a run directory as FindRun
// returns it: its parent (the root) is the caller's and may be reached
// through links, but the job may have replaced anything below it, so the
// stream is opened as supervise.OpenIn opens files: a link (the run
// directory, its .leaselog folder, the stream itself), a named pipe, a hard
// link to a file elsewhere are refused with a *supervise.KindError, at
// once.
//
// The read runs on a goroutine of its own and ReadOutput returns when ctx
// is done even if the read has not (a regular file on a hung network
// filesystem: O_NONBLOCK does nothing for it); at most maxReads such reads
// run at once, so a hung filesystem holds that many threads, not one per
// call.
func ReadOutput(ctx context.Context, dir, stream string, offset int64, max int) ([]byte, error) {
	if stream != stdoutFile && stream != stderrFile {
		return nil, fmt.Errorf("stream %q: want stdout or stderr", stream)
	}
	if offset < 0 {
		return nil, fmt.Errorf("offset %d: must be 0 or more", offset)
	}
	return bounded(ctx, reads, func() ([]byte, error) { return readOutput(dir, stream, offset, max) })
}

func readOutput(dir, stream string, offset int64, max int) ([]byte, error) {
	f, err := supervise.OpenIn(filepath.Dir(dir), filepath.Base(dir)+"/"+stateDir+"/"+stream)
	if errors.Is(err, fs.ErrNotExist) {
		if fileExists(filepath.Join(dir, stateDir)) {
			return nil, nil // started, no output file yet
		}
		return nil, fmt.Errorf("%s: %w", dir, ErrNoRun)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// What is there now, and no more than asked: the buffer is not max
	// bytes for a small output.
	n := min(int64(max), fi.Size()-offset)
	if n <= 0 {
		return nil, nil
	}
	buf := make([]byte, n)
	got, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:got], nil
}

// maxReads bounds the reads of output in flight (ReadOutput).
const maxReads = 16

// reads holds a token per read of output in flight, those stuck in the
// kernel included.
var reads = make(chan struct{}, maxReads)

// bounded runs read on a goroutine of its own, once one of slots is free,
// and returns what it returns, or an error wrapping ctx's once ctx is
// done: the caller is held no longer than ctx allows, whatever the read
// does; the slot is freed when the read returns.
func bounded(ctx context.Context, slots chan struct{}, read func() ([]byte, error)) ([]byte, error) {
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("read output: all %d reads busy: %w", cap(slots), ctx.Err())
	}
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() { <-slots }()
		b, err := read()
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("read output: %w", ctx.Err())
	}
}

// RunEnded reports whether a run's command is over, so that its output will
// not grow: its exit status is on disk, or its supervisor is gone.
func RunEnded(dir string) bool {
	if fileExists(filepath.Join(dir, stateDir, exitFile)) {
		return true
	}
	pid, err := readPid(dir)
	if err != nil {
		return false // still starting (or never started: the job's state tells)
	}
	abs, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return true
	}
	return !groupAlive(pid, abs)
}
