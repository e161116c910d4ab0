package api

import (
	"context"
	"net/http"
)

// BackupPath is the admin call that writes a backup of the daemon's store.
const BackupPath = "/v1/admin/backup"

// BackupRequest is the body of POST /v1/admin/backup.
type BackupRequest struct {
	// To is the directory to write the copy in, an absolute path on the
	// daemon's host: it must not exist, or be empty, and its parent must.
	To string `json:"to"`
}

// Backup says what a backup wrote.
type Backup struct {
	To string `json:"to"`
	// Seq is the copy's last event: it holds every event up to it (every
	// event acknowledged before the call, and maybe a few after), and none
	// after.
	Seq         uint64  `json:"seq"`
	Files       int     `json:"files"`
	Bytes       int64   `json:"bytes"` // the files' size, hard-linked to the store's or copied
	TookSeconds float64 `json:"took_seconds"`
}

// Backup asks the daemon to write a consistent copy of its store into the
// directory to, on the daemon's host (admin).
func (c *Client) Backup(ctx context.Context, to string) (Backup, error) {
	var b Backup
	_, err := c.do(ctx, http.MethodPost, BackupPath, BackupRequest{To: to}, &b)
	return b, err
}
