package supervise

import "golang.org/x/sys/unix"

// ProbeStore looks at the lock of a store (eventlog.LockFile: a record
// lock, which its daemon holds from open to close or death) without taking
// it: an open file description lock test (F_OFD_GETLK) for a write lock on
// the whole file. A test takes nothing, so the daemon's own lock is never
// refused because of it, and a test made while the daemon starts sees it
// either before or after. The file is opened afresh each time, never
// following the daemon's old file: a store put back at its path (a disk
// swapped, a backup restored) is the one looked at.
//
// Never call it in the process that holds the lock: closing a descriptor of
// the file releases that process's record locks on it.
func ProbeStore(path string) StoreLook {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return StoreLook{}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return StoreLook{}
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK} // whence 0, start 0, len 0: the whole file
	if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &lk); err != nil {
		return StoreLook{}
	}
	look := StoreLook{
		Free: lk.Type == unix.F_UNLCK,
		File: FileID{Dev: st.Dev, Ino: st.Ino, Ctime: st.Ctim.Nano()},
	}
	if !look.Free && lk.Pid > 0 {
		look.Holder = int(lk.Pid)
	}
	return look
}
