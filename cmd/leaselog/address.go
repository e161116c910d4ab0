package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/leaselog/leaselog/api"
)

// serverURL turns the address a user gives (--server, $LEASELOG_SERVER)
// into the client's: a bare host:port is http://host:port, a path (one
// with a '/', as a socket's: /run/leaselog.sock, ./leaselog.sock) is
// unix://path, and http://, https:// and unix:// addresses are kept. ""
// is api.DefaultServer.
func serverURL(s string) (string, error) {
	switch {
	case s == "":
		return api.DefaultServer, nil
	case strings.HasPrefix(s, "unix://"), strings.HasPrefix(s, "http://"), strings.HasPrefix(s, "https://"):
		return s, nil
	case strings.Contains(s, "://"):
		return "", fmt.Errorf("server %q: want host:port, http(s)://host:port, unix:///path or a socket's path", s)
	case strings.HasPrefix(s, "/"), strings.HasPrefix(s, "./"), strings.HasPrefix(s, "../"):
		return "unix://" + s, nil
	}
	if _, port, err := net.SplitHostPort(s); err != nil || port == "" {
		return "", fmt.Errorf("server %q: want host:port, http(s)://host:port, unix:///path or a socket's path", s)
	}
	return "http://" + s, nil
}

// resolveServer is the daemon's address: flag, else $LEASELOG_SERVER, else
// the default, as serverURL reads it.
//
// A comma-separated list (an active daemon and its standbys, tried as
// api/servers.go says) is read element by element.
func resolveServer(flag string) (string, error) {
	if flag == "" {
		flag = os.Getenv("LEASELOG_SERVER")
	}
	if !strings.Contains(flag, ",") {
		return serverURL(flag)
	}
	list := strings.Split(flag, ",")
	for i, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			return "", fmt.Errorf("server list %q: an empty element", flag)
		}
		u, err := serverURL(s)
		if err != nil {
			return "", fmt.Errorf("server list %q: %w", flag, err)
		}
		list[i] = u
	}
	return strings.Join(list, ","), nil
}

// unreachableError is a call that never reached the daemon: nothing
// listens there, the socket is missing, the name does not resolve.
type unreachableError struct {
	server string // as the client dialled it: http://host:port or unix:///path
	reason string // what the dial said, in a few words
	err    error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach the daemon at %s: %s — is `leaselog serve` running? set --server or LEASELOG_SERVER", e.server, e.reason)
}

func (e *unreachableError) Unwrap() error { return e.err }

// explainUnreachable makes an error of a call whose connection failed say
// where the client looked and what to check; any other error is returned
// as it is.
func explainUnreachable(err error) error {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		return err
	}
	e := &unreachableError{err: err}
	var listed *api.ServerError // of a list of servers: the last one dialled
	switch {
	case errors.As(err, &listed):
		e.server = listed.Server
	case op.Net == "unix" && op.Addr != nil:
		e.server = "unix://" + op.Addr.String()
	default:
		var u *url.Error
		if errors.As(err, &u) {
			if parsed, perr := url.Parse(u.URL); perr == nil {
				e.server = parsed.Scheme + "://" + parsed.Host
			}
		}
		if e.server == "" && op.Addr != nil {
			e.server = op.Addr.String()
		}
	}
	var errno syscall.Errno
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns):
		e.reason = "no such host " + dns.Name
	case errors.As(err, &errno):
		e.reason = errno.Error()
	case op.Timeout():
		e.reason = "timed out"
	default:
		e.reason = op.Err.Error()
	}
	return e
}

// serverHelp is the help of every --server flag.
const serverHelp = "daemon address: host:port, http(s)://host:port, unix:///path or a socket's path; or a comma-separated list of them, an active daemon and its standbys (default $LEASELOG_SERVER or " + api.DefaultServer + ")"
