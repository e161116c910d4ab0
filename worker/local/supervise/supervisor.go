package supervise

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaselog/leaselog/hostclock"
)

// Exit codes of the supervisor itself (its job's status goes to the exit file).
const (
	exitOK      = 0
	exitUsage   = 2
	exitFailure = 70 // could not start the job, or could not record its end
)

// supervisor is the state of one supervisor process.
type supervisor struct {
	state string // the .leaselog folder
	grace time.Duration
	log   *log.Logger
	self  int // our pid = the job's process group id

	job    int  // the pid of /bin/sh -c RUN
	ended  bool // the job has been reaped
	status int  // its exit status, 128+N for signal N

	killed    bool // the whole tree was killed (a kill, a fence or a grace)
	cancelled bool // the job's group got a cancel's SIGTERM
	forwarded bool // someone else's stop signal was forwarded
	fenced    bool // the fence passed: fenced file written

	// The last fence deadline read: kept when the file goes missing or
	// turns unreadable, so that deleting it (or the whole run directory)
	// never unfences a job.
	fence struct {
		set   bool
		lost  bool // the file went missing or unreadable since
		clock hostclock.Clock
		at    time.Time
	}

	// store is the lock file of the daemon's store, for a job of the
	// daemon's own worker ("" otherwise); absence counts the time no
	// process held it, which moves the deadline (absence.go).
	store   string
	absence Absence
	freeAt  time.Time // when the lock was first found free, for the log
}

// Main is the supervisor: args are the .leaselog folder, the stop grace,
// the command and, for a job of the daemon's own worker, the lock file of
// its store (Command). It returns the supervisor's exit code.
func Main(args []string) int {
	logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds|log.LUTC)
	if len(args) != 3 && len(args) != 4 {
		logger.Printf("usage: %s STATE GRACE RUN [STORE-LOCK]", Marker)
		return exitUsage
	}
	grace, err := time.ParseDuration(args[1])
	if err != nil {
		logger.Printf("bad grace: %v", err)
		return exitUsage
	}
	s := &supervisor{state: args[0], grace: grace, log: logger, self: os.Getpid()}
	if len(args) == 4 {
		if !filepath.IsAbs(args[3]) {
			logger.Printf("store lock %q: not an absolute path", args[3])
			return exitUsage
		}
		s.store = args[3]
	}
	logger.SetPrefix("supervisor " + strconv.Itoa(s.self) + ": ")
	if err := s.run(args[2]); err != nil {
		logger.Print(err)
		return exitFailure
	}
	return exitOK
}

func (s *supervisor) run(cmd string) error {
	// Orphans of the job come back to us, not to init: the whole tree stays
	// below us, to be found and killed.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_CHILD_SUBREAPER: %w", err)
	}
	// Started with Setsid by Command; make sure of it when started by hand.
	if pgrp := syscall.Getpgrp(); pgrp != s.self {
		if _, err := syscall.Setsid(); err != nil {
			return fmt.Errorf("setsid: %w", err)
		}
	}
	stops := make(chan os.Signal, 4)
	signal.Notify(stops, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	abandon := make(chan os.Signal, 1)
	signal.Notify(abandon, KillSignal)
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)

	// fds 3 and 4 are the job's stdout and stderr (Command's ExtraFiles):
	// the job gets them as 1 and 2 and nothing else of ours.
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	// Pdeathsig: if the supervisor itself is killed, nobody holds the fence
	// any more, so the job must not run on; its own descendants are beyond
	// this (only a cgroup would hold them). The signal follows the thread
	// that forked: keep it for the supervisor's life.
	runtime.LockOSThread()
	if s.store != "" {
		// The daemon that starts us holds its store: a first look arms
		// the count, should the daemon be gone by the first fence poll.
		s.lookAtStore(0, time.Time{})
	}
	pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", cmd}, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 3, 4},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return fmt.Errorf("start /bin/sh: %w", err)
	}
	s.job = pid
	s.log.Printf("started job %d", pid)

	poll := time.NewTicker(FencePoll)
	defer poll.Stop()
	var graceOver <-chan time.Time
	for !s.ended {
		select {
		case <-children:
			s.reap(false)
		case sig := <-stops:
			if s.onStop(sig) {
				graceOver = time.After(s.grace)
			}
		case <-abandon:
			s.log.Printf("%v: killing the job's tree", KillSignal)
			s.killTree()
		case <-graceOver:
			s.log.Printf("stop grace of %v over: killing the job's tree", s.grace)
			s.killTree()
		case <-poll.C:
			s.reap(false) // a SIGCHLD may have been merged with one already handled
			s.checkFence()
		}
	}
	// What the command left behind does not outlive it.
	s.killTree()
	s.log.Printf("job ended, status %d", s.status)
	if err := WriteFileAtomic(filepath.Join(s.state, ExitFile), []byte(strconv.Itoa(s.status)+"\n")); err != nil {
		return fmt.Errorf("record exit status: %w", err)
	}
	return nil
}

// onStop handles a stop signal; it reports whether a cancel's grace starts.
func (s *supervisor) onStop(sig os.Signal) (startGrace bool) {
	if s.killed {
		return false
	}
	b, err := ReadSmall(s.state, StopFile, 64)
	mode := strings.TrimSpace(string(b))
	switch {
	case err == nil && mode == "kill":
		s.log.Printf("%v: stop %q: killing the job's tree", sig, mode)
		s.killTree()
	case err == nil && mode == "cancel":
		if s.cancelled {
			return false // our own SIGTERM to the group, or a repeat
		}
		s.cancelled = true
		s.log.Printf("%v: stop %q: SIGTERM to the job, its tree killed in %v", sig, mode, s.grace)
		s.signalGroup(syscall.SIGTERM)
		return true
	case s.forwarded || s.cancelled || (err == nil && mode != ""):
		// Forwarded once already (our own forward comes back to us too), or
		// a stop file we cannot read: a job must see one TERM, not two.
	default:
		s.forwarded = true
		s.log.Printf("%v from outside: SIGTERM forwarded to the job", sig)
		s.signalGroup(syscall.SIGTERM)
	}
	return false
}

// signalGroup signals our process group: the job and the descendants that
// stayed in it (we get it too, and ignore it: see onStop).
func (s *supervisor) signalGroup(sig syscall.Signal) {
	if err := syscall.Kill(-s.self, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		s.log.Printf("signal group: %v", err)
	}
}

// checkFence stops the job once its fence clock reaches the deadline.
func (s *supervisor) checkFence() {
	if s.killed {
		return
	}
	// A missing or unreadable file keeps the last deadline: half a rename
	// cannot be seen, so this is the directory gone or a job writing
	// garbage, and the worker's next renewal rewrites the file.
	c, at, err := ReadFence(s.state)
	switch {
	case err == nil:
		if !s.fence.set {
			s.log.Printf("fence set: %s deadline %d", c, at.UnixNano())
		}
		if !s.fence.set || c != s.fence.clock || !at.Equal(s.fence.at) {
			if moved := s.absence.Credit(); moved > 0 {
				was := s.fence.at.Add(moved)
				s.log.Printf("fence renewed: %s deadline %d; the store's absence had moved the last one by %v, to %v from now",
					c, at.UnixNano(), moved, was.Sub(c.Now()))
			}
			s.absence.NewDeadline()
		}
		s.fence.set, s.fence.clock, s.fence.at, s.fence.lost = true, c, at, false
	case s.fence.set && !s.fence.lost:
		s.fence.lost = true // said once, until the file is back
		s.log.Printf("fence file: %v; the last deadline holds", err)
	}
	if !s.fence.set {
		return
	}
	c, at = s.fence.clock, s.fence.at
	now := c.Now()
	if s.store != "" {
		now = s.lookAtStore(c, now)
	}
	credit := s.absence.Credit()
	if now.Before(at.Add(credit)) {
		return
	}
	s.fenced = true
	note := fmt.Sprintf("%s deadline %d passed at %d\n", c, at.UnixNano(), now.UnixNano())
	if credit > 0 {
		note = fmt.Sprintf("%s deadline %d, moved %v by the store's absence, passed at %d\n", c, at.UnixNano(), credit, now.UnixNano())
	}
	if err := WriteFileAtomic(filepath.Join(s.state, FencedFile), []byte(note)); err != nil {
		s.log.Printf("record the fence: %v", err)
	}
	s.log.Printf("fence: %s", strings.TrimSpace(note))
	s.killTree()
}

// lookAtStore looks at the store's lock, the look beginning at now on the
// fence clock c, and counts the time it stays free (Absence). It returns the
// clock's reading at the end of the look. With no clock (c zero: the first
// look, before the job starts and any fence is read) the look only arms the
// count.
func (s *supervisor) lookAtStore(c hostclock.Clock, now time.Time) time.Time {
	look := ProbeStore(s.store)
	var end time.Time
	if c != 0 {
		end = c.Now()
	}
	wasFree, wasArmed := s.absence.Free(), s.absence.Armed()
	s.absence.Look(now, end, look)
	switch {
	case s.absence.Armed() && !wasArmed:
		s.log.Printf("store %s: held by pid %d; the fence deadline moves by the time no process holds it", s.store, look.Holder)
	case look.Free && !wasFree:
		s.freeAt = end
		s.log.Printf("store %s: no daemon holds it; the fence deadline moves with the time it stays free", s.store)
	case !look.Free && wasFree:
		held := "the file is not there or cannot be looked at"
		if look.Holder > 0 {
			held = fmt.Sprintf("held by pid %d", look.Holder)
		} else if look.File != (FileID{}) {
			held = "held"
		}
		s.log.Printf("store %s: %s after %v free; the deadline moved %v", s.store, held, end.Sub(s.freeAt), s.absence.Credit())
	}
	return end
}

// killTree SIGKILLs all our descendants and reaps them, until none is left.
func (s *supervisor) killTree() {
	s.killed = true
	for {
		pids, err := descendants(s.self)
		if err != nil {
			s.log.Printf("list descendants: %v", err)
		}
		if len(pids) == 0 {
			s.reap(false) // direct children /proc missed, if any
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		// Block until one of our children dies, then reap the rest that
		// have: orphans of the dead are ours now, found by the next pass.
		s.reap(true)
	}
}

// reap reaps ended children, recording the job's status; block waits for
// at least one.
func (s *supervisor) reap(block bool) {
	opts := syscall.WNOHANG
	if block {
		opts = 0
	}
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, opts, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return // ECHILD: none left; 0: none ended
		}
		opts = syscall.WNOHANG
		if pid == s.job {
			s.ended = true
			switch {
			case ws.Exited():
				s.status = ws.ExitStatus()
			case ws.Signaled():
				s.status = 128 + int(ws.Signal())
			}
		}
	}
}

// descendants lists the processes below pid, from the ppid links of /proc.
func descendants(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, ok := parentOf(p)
		if ok {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out, nil
}

// parentOf reads the ppid of a process: "pid (comm) state ppid …".
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false // gone meanwhile
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}
