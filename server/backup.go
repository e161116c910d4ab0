package server

import (
	"net/http"
	"path/filepath"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/lease"
)

// backup answers POST /v1/admin/backup: a consistent copy of the store
// written into the directory the body names, on the daemon's host, and what
// was written. The directory must be absolute (400 naming to); one that
// cannot take the copy (not empty, no parent…) is a 400 too, and nothing is
// written.
func (s *Server) backup(w http.ResponseWriter, r *http.Request, c *call) error {
	if _, err := params(r); err != nil {
		return err
	}
	var in api.BackupRequest
	if err := decodeBody(r, &in, false); err != nil {
		return err
	}
	switch {
	case in.To == "":
		return badRequest("missing to: the directory to write the backup in, an absolute path on the daemon's host")
	case !filepath.IsAbs(in.To):
		return badRequest("to %q: want an absolute path: the directory is written on the daemon's host", in.To)
	}
	to := filepath.Clean(in.To)
	start := time.Now()
	info, err := s.backupTo(to)
	if err != nil {
		return err
	}
	out := api.Backup{To: to, Seq: info.Seq, Files: info.Files, Bytes: info.Bytes, TookSeconds: time.Since(start).Seconds()}
	s.log.Info().Str("to", to).Uint64("seq", out.Seq).Int("files", out.Files).Int64("bytes", out.Bytes).
		Float64("took_seconds", out.TookSeconds).Msg("backup written")
	s.writeJSON(w, c, http.StatusOK, out)
	return nil
}

// backupTo writes the backup: Options.Backup, else the service's.
func (s *Server) backupTo(dir string) (lease.BackupInfo, error) {
	if s.opts.Backup != nil {
		return s.opts.Backup(dir)
	}
	return s.svc.Backup(dir)
}
