package local

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/leaselog/leaselog/worker/local/supervise"
)

// jobEnv is the environment of a job: the daemon's, without what must not
// leak into a job, plus the LEASELOG_ variables that tell the job where it is.
func jobEnv(r *run) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		// LEASELOG_TOKEN is the worker's credential: a job must not report
		// on leases. GIT_DIR and its kind would point the job's git at
		// another repository than its worktree.
		if strings.HasPrefix(name, "LEASELOG_") || isGitLocationVar(name) {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"LEASELOG_JOB="+r.job,
		"LEASELOG_LEASE="+strconv.FormatUint(r.lease, 10),
		"LEASELOG_WORKDIR="+r.dir,
		"LEASELOG_RESULT="+r.path(resultFile),
		"LEASELOG_PROGRESS="+r.path(progressFile),
	)
}

// isGitLocationVar reports whether a variable makes git choose a
// repository, a work tree or an index other than the current directory's.
func isGitLocationVar(name string) bool {
	switch name {
	case "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
		"GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_PREFIX", "GIT_CEILING_DIRECTORIES",
		"GIT_DISCOVERY_ACROSS_FILESYSTEM":
		return true
	}
	return false
}

// spawn starts the supervisor of a prepared run, writes its pid file and
// hands the child to a reaping goroutine.
func (e *Executor) spawn(r *run) error {
	stdout, err := os.OpenFile(r.path(stdoutFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer stdout.Close()
	stderr, err := os.OpenFile(r.path(stderrFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer stderr.Close()
	if r.firstFence > 0 {
		// Until the worker's own first Fence (right after Start returns):
		// a worker that dies in between must not leave the job unfenced.
		if err := supervise.WriteFence(r.path(""), e.clock, e.clock.Now().Add(r.firstFence)); err != nil {
			return fmt.Errorf("write fence: %w", err)
		}
	}

	// Files, not pipes: the job writes to them directly, so neither its
	// output nor its supervisor depends on this process being alive.
	cmd, logFile, err := supervise.Command(r.path(""), e.grace, r.spec.Run, e.store, stdout, stderr)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd.Dir = r.dir
	cmd.Env = jobEnv(r)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", r.dir, err)
	}
	r.pid, r.owned = cmd.Process.Pid, true
	if err := supervise.WriteFileAtomic(r.path(pidFile), []byte(strconv.Itoa(r.pid)+"\n")); err != nil {
		// A run no restart could find must not run on. The job is not
		// started before the supervisor has set itself up, so killing the
		// group kills everything.
		_ = syscall.Kill(-r.pid, syscall.SIGKILL)
		go func() { _ = cmd.Wait() }() // reap it; the start has failed
		return fmt.Errorf("write pid file: %w", err)
	}
	r.log.Info().Int("pid", r.pid).Str("dir", r.dir).Bool("checkout", r.spec.Checkout != nil).Msg("local: started")
	go r.reap(cmd)
	return nil
}

// reap waits for an owned supervisor to end, then finishes the run. It
// marks the run gone while the supervisor is still an unreaped zombie, and
// only then reaps it: until then its pid, which Stop signals, cannot be
// recycled.
func (r *run) reap(cmd *exec.Cmd) {
	if err := waitExited(r.pid); err != nil {
		r.log.Warn().Err(err).Msg("local: waitid failed; reaping directly")
	}
	r.markGone()
	detail := ""
	if err := cmd.Wait(); err != nil {
		detail = "supervisor: " + err.Error()
	}
	r.finish(detail)
}

// waitExited blocks until child pid has exited, without reaping it
// (waitid WEXITED|WNOWAIT; the syscall package does not wrap waitid).
func waitExited(pid int) error {
	const pPID = 1        // idtype_t P_PID
	var siginfo [128]byte // siginfo_t, filled in and ignored
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&siginfo[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch errno {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return fmt.Errorf("waitid %d: %w", pid, errno)
		}
	}
}

// procStat reads the state, process group and session of a process from
// /proc/<pid>/stat: "pid (comm) state ppid pgrp session …".
func procStat(pid int) (state byte, pgrp, session int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, err
	}
	// comm may hold spaces and parentheses: cut after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 || len(f[0]) != 1 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	pgrp, err1 := strconv.Atoi(f[2])
	session, err2 := strconv.Atoi(f[3])
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return f[0][0], pgrp, session, nil
}

// groupAlive reports whether pid is still the live supervisor of the run in
// dir: a running process that leads its own process group and works in dir.
// A recycled pid may lead a group of its own too, but it will not be working
// in this run's directory. A zombie counts as gone: it has ended, and its
// reaper (init, once the daemon that started it died) may be slow.
func groupAlive(pid int, dir string) bool {
	state, pgrp, _, err := procStat(pid)
	if err != nil || pgrp != pid || state == 'Z' || state == 'X' || state == 'x' {
		return false
	}
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		// Not allowed to look (another user): the group id must do.
		return !errors.Is(err, os.ErrNotExist)
	}
	return strings.TrimSuffix(cwd, " (deleted)") == dir
}
