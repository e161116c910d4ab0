package main

// The admin token of a daemon with a local worker and no [auth] section.
// Its local worker runs any submitted command as the daemon's user, so an
// open API would let every local user do that: the daemon generates a token
// into a file only its user can read (as Jupyter does), and the CLI of that
// user finds it there with no setup.

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/leaselog/leaselog/api"
)

// tokenFileName is the admin token's file in the data directory, and
// workerTokenFileName the workers' token's: a token that may act as any
// worker and nothing else (server.Auth.AnyWorker), for the workers this
// host's user runs against the daemon (`leaselog worker`, the Python
// Worker). Both are the user's already: the admin token runs any command
// through the local worker.
const (
	tokenFileName       = "token"
	workerTokenFileName = "worker-token"
)

// errTokenFile is wrapped by every refusal of an existing token file.
var errTokenFile = errors.New("token file")

// loadOrCreateToken returns the token kept in dir/name, generating it on the
// first start. The file is written whole or not at all (a temporary
// file, synced, renamed, the directory synced), mode 0600, and reused across
// restarts so that a CLI holding it keeps working. A file another user could
// read, or that is not the daemon user's, is refused rather than trusted or
// silently replaced: its token may have leaked.
func loadOrCreateToken(dir, name string) (token, path string, err error) {
	path = filepath.Join(dir, name)
	token, err = readTokenFile(path)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return token, path, err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", path, fmt.Errorf("token: %w", err)
	}
	token = base64.RawURLEncoding.EncodeToString(b)
	f, err := os.CreateTemp(dir, "."+name+"-*") // 0600, whatever the umask
	if err != nil {
		return "", path, fmt.Errorf("token: %w", err)
	}
	tmp := f.Name()
	_, err = f.WriteString(token + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", path, fmt.Errorf("token: write %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		return "", path, fmt.Errorf("token: %w", err)
	}
	return token, path, nil
}

// readTokenFile reads a token file, refusing one that others may read.
func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w %s: not a regular file", errTokenFile, path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%w %s: mode %04o lets other users read it; remove it (a new token is generated at the next start) or chmod 600 it", errTokenFile, path, perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("%w %s: owned by uid %d, not this user (%d)", errTokenFile, path, st.Uid, os.Geteuid())
	}
	b := make([]byte, 4096)
	n, err := f.Read(b)
	if err != nil && n == 0 {
		return "", fmt.Errorf("%w %s: %v", errTokenFile, path, err)
	}
	token := strings.TrimSpace(string(b[:n]))
	if len(token) < 16 || strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("%w %s: does not hold a token (one line of at least 16 characters)", errTokenFile, path)
	}
	return token, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// defaultDataDir is store.dir's default, where the CLI looks for the token
// file when told nothing.
const defaultDataDir = "./leaselog-data"

// clientToken is the token a client command sends to server: $LEASELOG_TOKEN
// if set; else, for a daemon on this host (a loopback address or a unix
// socket), the token file of the data directory named by --data, else
// $LEASELOG_DATA, else ./leaselog-data — if there is one. A token file is
// never sent to another host: it is this host's daemon's admin token. No
// token at all is not an error; an open daemon needs none.
func clientToken(server, dataDir string) (string, error) {
	t, _, err := localToken(server, dataDir, tokenFileName)
	return t, err
}

// localToken is clientToken for the token file name: the token and where
// it was found ("" for none).
func localToken(server, dataDir, name string) (token, from string, err error) {
	if t, ok := os.LookupEnv("LEASELOG_TOKEN"); ok {
		if strings.TrimSpace(t) == "" {
			return "", "", errors.New("LEASELOG_TOKEN is set but blank: unset it or give it a token")
		}
		return t, "$LEASELOG_TOKEN", nil
	}
	if !localServer(server) {
		return "", "", nil
	}
	if dataDir == "" {
		dataDir = os.Getenv("LEASELOG_DATA")
	}
	if dataDir == "" {
		dataDir = defaultDataDir
	}
	path := filepath.Join(dataDir, name)
	t, err := readTokenFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", nil
	}
	return t, path, err
}

// localServer tells whether a server address is on this host; a list of
// servers is when all of them are.
func localServer(server string) bool {
	if server == "" {
		server = api.DefaultServer
	}
	if list := strings.Split(server, ","); len(list) > 1 {
		for _, s := range list {
			if s == "" || !localServer(s) {
				return false
			}
		}
		return true
	}
	if strings.HasPrefix(server, "unix://") {
		return true
	}
	u, err := url.Parse(server)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
