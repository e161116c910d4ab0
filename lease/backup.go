package lease

import (
	"errors"
	"fmt"

	"github.com/leaselog/leaselog/eventlog"
)

// ErrBackupElsewhere is the refusal of a daemon whose store is not backed up
// through it (engine jetstream: the log is the NATS stream), wrapped with
// what backs it up.
var ErrBackupElsewhere = errors.New("this daemon's store is not backed up through the daemon")

// BackupInfo says what Backup wrote.
type BackupInfo struct {
	Seq   uint64 // the copy holds every event up to Seq, and none after
	Files int    // files in the copy
	Bytes int64  // their size, whether hard-linked or copied
}

// Backup writes a consistent copy of the store into dir, on the daemon's
// host (eventlog.Log.Checkpoint): it holds every event acknowledged before
// the call, and opens as the store does. The service goes on deciding
// meanwhile. A dir that cannot take a copy is ErrInvalid, and nothing is
// written; a failed service refuses with its error.
func (s *Service) Backup(dir string) (BackupInfo, error) {
	if err := s.Err(); err != nil {
		return BackupInfo{}, err
	}
	info, err := s.log.Checkpoint(dir)
	switch {
	case errors.Is(err, eventlog.ErrTarget):
		return BackupInfo{}, fmt.Errorf("%w: to: %w", ErrInvalid, err)
	case err != nil: // a copy that failed fails the service only if the log did
		return BackupInfo{}, fmt.Errorf("lease: backup to %s: %w", dir, s.logErr(err, "backup"))
	}
	return BackupInfo{Seq: info.Seq, Files: info.Files, Bytes: info.Bytes}, nil
}
