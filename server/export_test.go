package server

import (
	"context"
	"net"
	"time"
)

// SetWaitHook makes s pass the context of every acquire's wait through f
// before waiting on it, so that a test can see the moment the wait begins.
// Set it before s serves any request.
func SetWaitHook(s *Server, f func(context.Context) context.Context) { s.waitHook = f }

// SetStreamHook makes every event stream of s tell f when it starts to wait
// for events ("wait") and when its handler returns ("end"). Set it before s
// serves any request; f is called from the streams' goroutines.
func SetStreamHook(s *Server, f func(stage string)) { s.streamHook = f }

// SetSessionHook gives f the connection of every worker session of s once
// it is upgraded, so that a test can cut it. Set it before s serves any
// request.
func SetSessionHook(s *Server, f func(net.Conn)) { s.sessionHook = f }

// SetSessionBacklog sets how many bytes of a session's answers may wait for
// its client before the daemon stops reading its frames (MaxSessionBacklog).
// Set it before s serves any request.
func SetSessionBacklog(s *Server, n int) { s.sessionBacklog = n }

// SetLinger bounds the time of s's lingering closes. Set it before s serves
// any request.
func SetLinger(s *Server, d time.Duration) { s.linger = d }

// The bounds of the log lines of refused calls, and of a lingering close.
const (
	LogBurst    = logBurst
	LogRate     = logRate
	LingerBytes = lingerBytes
)
