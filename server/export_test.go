package server

import "context"

// SetWaitHook makes s pass the context of every acquire's wait through f
// before waiting on it, so that a test can see the moment the wait begins.
// Set it before s serves any request.
func SetWaitHook(s *Server, f func(context.Context) context.Context) { s.waitHook = f }
