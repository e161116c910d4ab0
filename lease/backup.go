package lease

import "github.com/leaselog/leaselog/eventlog"

// Backup writes a consistent copy of the store into dir, on the daemon's
// host (eventlog.Log.Checkpoint): it holds every event acknowledged before
// the call, and opens as the store does. The service goes on deciding
// meanwhile. A dir that cannot take a copy is an error wrapping
// eventlog.ErrTarget; a failed service refuses with its error.
func (s *Service) Backup(dir string) (eventlog.CheckpointInfo, error) {
	if err := s.Err(); err != nil {
		return eventlog.CheckpointInfo{}, err
	}
	return s.log.Checkpoint(dir)
}
