package main

// A worker's token must not reach its jobs. They do not inherit it from the
// environment alone: a job running as the same user can read
// /proc/<worker pid>/environ, which keeps the environment the process was
// started with, whatever it unsets later. So a process given LEASELOG_TOKEN
// re-executes itself (same pid, same arguments) with an environment without
// it, handing the token over a pipe that it closes once read.

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	tokenEnv = "LEASELOG_TOKEN"
	// tokenFDEnv names the pipe a re-executed process reads its token from.
	// It is set only by reexecWithoutToken.
	tokenFDEnv = "LEASELOG_TOKEN_FD"
)

// execFunc replaces the process, as syscall.Exec; it returns only on failure.
type execFunc func(argv0 string, argv []string, envv []string) error

// takeToken returns the token of a worker: from the pipe of a re-executed
// process, from tokenFile, or from $LEASELOG_TOKEN — in which case the process
// is first re-executed without it, and takeToken returns in the new process.
// Main.Exec nil (the program run in-process by tests) only unsets the
// variable.
func (m *Main) takeToken(tokenFile string) (string, error) {
	if fd, ok := os.LookupEnv(tokenFDEnv); ok {
		_ = os.Unsetenv(tokenFDEnv)
		n, err := strconv.Atoi(fd)
		if err != nil || n < 3 {
			return "", fmt.Errorf("%s=%q: not a file descriptor", tokenFDEnv, fd)
		}
		f := os.NewFile(uintptr(n), "token pipe")
		b, err := io.ReadAll(io.LimitReader(f, 4096))
		f.Close()
		if err != nil {
			return "", fmt.Errorf("read the token from %s=%d: %w", tokenFDEnv, n, err)
		}
		return checkToken(string(b), tokenEnv)
	}
	token, inEnv := os.LookupEnv(tokenEnv)
	if tokenFile != "" {
		if inEnv {
			return "", fmt.Errorf("both --token-file and $%s are given: keep one", tokenEnv)
		}
		return readTokenFile(tokenFile)
	}
	if !inEnv {
		return "", nil
	}
	if _, err := checkToken(token, "$"+tokenEnv); err != nil {
		return "", err
	}
	return token, m.reexecWithoutToken(token)
}

func checkToken(token, from string) (string, error) {
	token = strings.TrimSpace(token)
	if token == "" {
		return "", fmt.Errorf("%s is blank: give a token, or none at all", from)
	}
	return token, nil
}

// reexecWithoutToken re-executes the process with $LEASELOG_TOKEN dropped
// from its environment. If token is not empty, the new process reads it from
// a pipe named by $LEASELOG_TOKEN_FD. It returns only on failure, or at once
// when the process is run in-process (Main.Exec nil).
func (m *Main) reexecWithoutToken(token string) error {
	if m.Exec == nil {
		return os.Unsetenv(tokenEnv)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, tokenEnv+"=") || strings.HasPrefix(kv, tokenFDEnv+"=")
	})
	var keep *os.File
	if token != "" {
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("hand the token over: %w", err)
		}
		// A token is far smaller than a pipe's buffer: the write cannot block.
		_, err = w.WriteString(token)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			_, err = unix.FcntlInt(r.Fd(), unix.F_SETFD, 0) // kept across exec
		}
		if err != nil {
			r.Close()
			return fmt.Errorf("hand the token over: %w", err)
		}
		env = append(env, tokenFDEnv+"="+strconv.Itoa(int(r.Fd())))
		keep = r
	}
	// /proc/self/exe is this very binary, even if its file was replaced.
	err := m.Exec("/proc/self/exe", os.Args, env)
	runtime.KeepAlive(keep) // its finalizer must not close the pipe before exec
	if keep != nil {
		keep.Close()
	}
	return fmt.Errorf("re-execute without $%s: %w", tokenEnv, err)
}

// dropTokenEnv re-executes a process that has no use for $LEASELOG_TOKEN
// without it (serve: its local worker's jobs must not find it in
// /proc/<daemon pid>/environ).
func (m *Main) dropTokenEnv() error {
	if _, ok := os.LookupEnv(tokenEnv); !ok {
		return nil
	}
	return m.reexecWithoutToken("")
}

// undumpable keeps processes of the same user — the jobs — from reading this
// process's memory (/proc/<pid>/mem, ptrace), where a token lives. Children
// are unaffected: execve makes a process dumpable again.
func undumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err)
	}
	return nil
}
