package server

import (
	"net/http"

	"github.com/leaselog/leaselog/ui"
)

// dashboard serves the web dashboard's embedded files (package ui).
var dashboard = ui.Handler()

// serveDashboard answers GET /ui/...: static files, no token, and no store
// touched, so a failed daemon still serves them (its API then says why).
func serveDashboard(w http.ResponseWriter, r *http.Request, _ *call) error {
	dashboard.ServeHTTP(w, r)
	return nil
}
