package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/lease"
)

// Auth is who may call what: the [auth] section of the config. Admin tokens
// may submit, cancel and kill jobs and read everything; auditor tokens may
// read (jobs, leases, events, metrics); a worker's token may only call the
// worker endpoints of its own id, and start and report leases in its own name.
// An AnyWorker token may act as any worker, and only as one: the token a
// daemon with no [auth] generates for the workers of its own user, whose
// admin token could run any command as that user anyway.
type Auth struct {
	Admin     []string
	Auditor   []string
	Workers   map[string]string // worker id -> token
	AnyWorker []string
}

// Validate checks that every token is non-empty and given once, and that
// every worker id is a valid id: a token in two roles is almost always a
// copy-paste mistake in the config.
func (a *Auth) Validate() error {
	if len(a.Admin)+len(a.Auditor)+len(a.Workers)+len(a.AnyWorker) == 0 {
		return &AuthError{Message: "names no token; remove the section to run open (loopback only)"}
	}
	seen := map[string]string{}
	add := func(key, token string) error {
		if len(token) < MinTokenLen {
			return &AuthError{key, fmt.Sprintf("a token must be at least %d characters", MinTokenLen)}
		}
		// A header carries a token trimmed and on one line: a token with
		// spaces or controls in it could never be sent as configured.
		if i := strings.IndexFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
			return &AuthError{key, fmt.Sprintf("a token must not contain spaces or control characters (byte %d)", i)}
		}
		if prev, ok := seen[token]; ok {
			return &AuthError{key, "the same token is given to " + prev}
		}
		seen[token] = key
		return nil
	}
	for i, t := range a.Admin {
		if err := add(fmt.Sprintf("admin[%d]", i), t); err != nil {
			return err
		}
	}
	for i, t := range a.Auditor {
		if err := add(fmt.Sprintf("auditor[%d]", i), t); err != nil {
			return err
		}
	}
	for i, t := range a.AnyWorker {
		if err := add(fmt.Sprintf("any_worker[%d]", i), t); err != nil {
			return err
		}
	}
	ids := make([]string, 0, len(a.Workers))
	for id := range a.Workers {
		ids = append(ids, id)
	}
	slices.Sort(ids) // the same config always names the same mistake
	for _, id := range ids {
		if err := lease.CheckID("worker", id); err != nil {
			return &AuthError{"workers." + id, err.Error()}
		}
		if err := add("workers."+id, a.Workers[id]); err != nil {
			return err
		}
	}
	return nil
}

// AuthError names what is wrong with an Auth, by its key in the [auth]
// section of the configuration ("admin[0]", "workers.w1"); the key is empty
// when the section as a whole is wrong.
type AuthError struct {
	Key     string
	Message string
}

func (e *AuthError) Error() string {
	if e.Key == "" {
		return "auth: " + e.Message
	}
	return "auth." + e.Key + ": " + e.Message
}

// MinTokenLen is the shortest token Validate accepts: a token is a secret,
// not a name.
const MinTokenLen = 16

// access is what a route asks of the caller's token.
type access uint8

const (
	open            access = iota // anyone: /healthz
	read                          // admin or auditor
	admin                         // admin
	ownWorker                     // the worker named in the path
	ownWorkerOrRead               // the worker named in the path, or admin or auditor
	anyWorker                     // a worker; the handler checks the body names it
	everyWorker                   // a token's role: any worker (Auth.AnyWorker)
)

// principal is what a token may act as. A token given to several roles
// (which Auth.Validate refuses) gets all of them.
type principal struct {
	admin, auditor bool
	workers        []string
	everyWorker    bool // any worker id (Auth.AnyWorker)
}

func (p *principal) reader() bool { return p.admin || p.auditor }

func (p *principal) isWorker(id string) bool { return p.everyWorker || slices.Contains(p.workers, id) }

func (p *principal) worker() bool { return p.everyWorker || len(p.workers) > 0 }

// authenticator holds the SHA-256 of every token. Comparing fixed-length
// digests in constant time keeps a caller from learning a token, or its
// length, from how long a refusal takes.
type authenticator struct {
	entries []authEntry
}

type authEntry struct {
	sum    [sha256.Size]byte
	role   access // admin, read (auditor), ownWorker or everyWorker
	worker string
}

func newAuthenticator(a *Auth) *authenticator {
	au := &authenticator{}
	add := func(token string, role access, worker string) {
		if token != "" { // an empty token must never let anyone in
			au.entries = append(au.entries, authEntry{sum: sha256.Sum256([]byte(token)), role: role, worker: worker})
		}
	}
	for _, t := range a.Admin {
		add(t, admin, "")
	}
	for _, t := range a.Auditor {
		add(t, read, "")
	}
	for id, t := range a.Workers {
		add(t, ownWorker, id)
	}
	for _, t := range a.AnyWorker {
		add(t, everyWorker, "")
	}
	return au
}

// lookup returns what token may act as, or nil for an unknown token. It
// compares against every entry, matched or not, so that its time does not
// depend on which entry matches.
func (au *authenticator) lookup(token string) *principal {
	sum := sha256.Sum256([]byte(token))
	var p principal
	found := false
	for i := range au.entries {
		e := &au.entries[i]
		if subtle.ConstantTimeCompare(sum[:], e.sum[:]) != 1 {
			continue
		}
		found = true
		switch e.role {
		case admin:
			p.admin = true
		case read:
			p.auditor = true
		case ownWorker:
			p.workers = append(p.workers, e.worker)
		case everyWorker:
			p.everyWorker = true
		}
	}
	if !found {
		return nil
	}
	return &p
}

// authorize checks the caller's token against what rt needs: 401 for a
// missing or unknown token, 403 for a known one that may not do this.
func (s *Server) authorize(r *http.Request, rt *route, c *call) error {
	if s.auth == nil || rt.access == open {
		return nil
	}
	token, err := tokenOf(r, rt) // streamauth.go
	if err != nil {
		return err
	}
	p := s.auth.lookup(token)
	if p == nil {
		return &api.Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthorized, Message: "unknown token"}
	}
	c.who = p
	var need string
	switch rt.access {
	case read:
		if p.reader() {
			return nil
		}
		need = "an admin or auditor token"
	case admin:
		if p.admin {
			return nil
		}
		need = "an admin token"
	case ownWorker:
		if p.isWorker(c.worker) {
			return nil
		}
		need = fmt.Sprintf("worker %q's token", c.worker)
	case ownWorkerOrRead:
		if p.reader() || p.isWorker(c.worker) {
			return nil
		}
		need = fmt.Sprintf("worker %q's token, or an admin or auditor token", c.worker)
	case anyWorker:
		if p.worker() {
			return nil
		}
		need = "a worker's token"
	default:
		return errors.New("server: route with unknown access") // a bug: fail closed
	}
	return forbidden("%s needs %s", rt.pattern, need)
}

// checkWorker refuses a call that speaks for a worker the token is not. A
// session's frame speaks for the worker of its header, and a start's or
// report's body must name that one, open daemon or not.
func (s *Server) checkWorker(c *call, worker string) error {
	if c.who != nil && !c.who.isWorker(worker) {
		return forbidden("this token is not worker %q's", worker)
	}
	if c.bound != "" && worker != c.bound {
		return forbidden("this frame speaks for worker %q, not %q", c.bound, worker)
	}
	return nil
}

func forbidden(format string, args ...any) *api.Error {
	return &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Message: fmt.Sprintf(format, args...)}
}

// bearer extracts the token of an "Authorization: Bearer TOKEN" header. The
// scheme is case-insensitive (RFC 9110, section 11.1). A blank token, or a
// header given twice, is refused by name rather than taken as no token: the
// caller meant to send one, and should hear what went wrong.
func bearer(values []string) (string, error) {
	unauthorized := func(msg string) (string, error) {
		return "", &api.Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthorized, Message: msg}
	}
	switch len(values) {
	case 0:
		return unauthorized("missing bearer token: send Authorization: Bearer TOKEN")
	case 1:
	default:
		return unauthorized(fmt.Sprintf("Authorization given %d times: send one bearer token", len(values)))
	}
	h := strings.TrimSpace(values[0])
	scheme, token, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return unauthorized("Authorization is not a bearer token: send Authorization: Bearer TOKEN")
	}
	if token = strings.TrimSpace(token); token == "" {
		return unauthorized("blank bearer token: send Authorization: Bearer TOKEN")
	}
	return token, nil
}
