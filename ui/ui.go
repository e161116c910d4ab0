// Package ui owns leaselog's web dashboard: the static files under static/
// (HTML, CSS and JavaScript modules written by hand: no build step, no Node
// toolchain, nothing fetched from the internet at run time), embedded in the
// binary, and the http.Handler that serves them under /ui/ (mounted by
// package server, without a token: the pages carry the token on their own
// API calls).
//
// The pages are clients of the public API alone (docs/openapi.yaml): an
// overview first (GET /v1/overview); the jobs, newest first, searched by id
// prefix, with filters and paging, and cancel and kill for an admin; a
// job's timeline (its leases as bands, on an axis broken over long gaps);
// the live leases with the time left to grace and to toleration; the
// workers; the stale-report ledger. They follow the log live over
// GET /v1/events/stream. A token, when the daemon takes one, is asked for
// or taken from the link's fragment (#token=…, which `leaselog serve`
// prints), and kept in the tab's sessionStorage only.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Prefix is the path the dashboard is served under.
const Prefix = "/ui/"

// files is static/ as the root of the dashboard.
var files = func() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed directive names static: cannot happen
	}
	return sub
}()

// FS returns the dashboard's files (for tests that check them).
func FS() fs.FS { return files }

// Handler serves the dashboard's files for paths under Prefix. The pages
// may load only what the daemon serves, and talk only to it (a Content
// Security Policy says so), and are never cached stale: a new binary serves
// new pages at once.
func Handler() http.Handler {
	fileServer := http.StripPrefix(Prefix[:len(Prefix)-1], http.FileServerFS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", csp)
		fileServer.ServeHTTP(w, r)
	})
}

// csp keeps the pages to the daemon's own origin: scripts, styles and calls.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
