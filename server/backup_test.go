package server_test

import (
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
	"github.com/leaselog/leaselog/server"
)

// TestBackup: an admin's backup is written where it names, on the daemon's
// host, and answers what it wrote; the copy opens and ends at the answer's
// seq. Bad input is a 400 naming to, and writes nothing anywhere.
func TestBackup(t *testing.T) {
	root := t.TempDir()
	f := newFixtureHooked(t, server.Options{Auth: testAuth()}, nil, leasetest.Disk(filepath.Join(root, "data")))
	f.submit("j1", event.KindRun)
	f.grant("w1")
	f.must(os.Mkdir(filepath.Join(root, "full"), 0o755))
	f.must(os.WriteFile(filepath.Join(root, "full", "mine"), []byte("x"), 0o644))
	f.must(os.WriteFile(filepath.Join(root, "file"), []byte("x"), 0o644))
	outside := func() map[string]string { // what the refusals must leave alone: all but the store
		sums := testutil.DirSums(t, root)
		maps.DeleteFunc(sums, func(k string, _ string) bool { return strings.HasPrefix(k, "data"+string(filepath.Separator)) })
		return sums
	}
	before := outside()
	for _, tc := range []struct {
		body any
		want string
	}{
		{`{}`, "missing to"},
		{api.BackupRequest{To: "backups/b1"}, `to "backups/b1": want an absolute path`},
		{api.BackupRequest{To: filepath.Join(root, "full")}, "to: eventlog: not a directory for a copy: " + filepath.Join(root, "full") + " exists and is not empty"},
		{api.BackupRequest{To: filepath.Join(root, "file")}, "to: eventlog: not a directory for a copy: " + filepath.Join(root, "file") + " exists and is not a directory"},
		{api.BackupRequest{To: filepath.Join(root, "none", "b1")}, "to: eventlog: not a directory for a copy: " + filepath.Join(root, "none", "b1") + ": its parent"},
		{api.BackupRequest{To: filepath.Join(root, "data", "b1")}, "inside the store's directory"},
		{`{"to":"/tmp/b1","when":"now"}`, "when"},
	} {
		wantError(t, f.do("POST", api.BackupPath, adminTok, tc.body), http.StatusBadRequest, api.CodeBadRequest, tc.want)
		if after := outside(); !maps.Equal(after, before) {
			t.Fatalf("a refused backup (%v) wrote:\n%v\nwas\n%v", tc.body, after, before)
		}
	}

	to := filepath.Join(root, "b1")
	b := decode[api.Backup](t, f.do("POST", api.BackupPath, adminTok, api.BackupRequest{To: to + "/"}), http.StatusOK)
	if b.To != to || b.Seq != f.log.DurableSeq() || b.Files == 0 || b.Bytes == 0 || b.TookSeconds <= 0 {
		t.Fatalf("backup: %+v; the log at %d", b, f.log.DurableSeq())
	}
	if !strings.Contains(f.logs.String(), `"message":"backup written"`) {
		t.Errorf("no log line for the backup:\n%s", f.logs)
	}
	cp, err := eventlog.Open(to, eventlog.Options{Logger: zerolog.Nop(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if cp.LastSeq() != b.Seq {
		t.Fatalf("the copy ends at seq %d, the answer said %d", cp.LastSeq(), b.Seq)
	}
}
