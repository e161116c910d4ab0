package local

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
// empty stream, not a missing one.
func ReadOutput(dir, stream string, offset int64, max int) ([]byte, error) {
	if stream != stdoutFile && stream != stderrFile {
		return nil, fmt.Errorf("stream %q: want stdout or stderr", stream)
	}
	if offset < 0 {
		return nil, fmt.Errorf("offset %d: must be 0 or more", offset)
	}
	f, err := os.Open(filepath.Join(dir, stateDir, stream))
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
	buf := make([]byte, max)
	n, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:n], nil
}

// RunEnded reports whether a run's command is over, so that its output will
// not grow: its exit status is on disk, or its supervisor is gone.
func RunEnded(dir string) bool {
	if fileExists(filepath.Join(dir, stateDir, exitFile)) {
		return true
	}
	pid, err := readPid(filepath.Join(dir, stateDir, pidFile))
	if err != nil {
		return false // still starting (or never started: the job's state tells)
	}
	abs, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return true
	}
	return !groupAlive(pid, abs)
}
