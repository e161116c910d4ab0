package server

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The rate of the log lines of refused calls: a burst of logBurst lines,
// then logRate a second. A refusal is a client's doing, and a client can
// send thousands a second: the log must not grow with them (one line each
// was hundreds of MB in 30 s). Every refusal is still counted in the
// metrics (leaselog_http_requests_total by status).
const (
	logRate  = 10
	logBurst = 50
)

// lineLimiter lets log lines through at logRate, counting those it holds
// back. Its time is the caller's (Options.Clock), so that a test decides
// when tokens come back.
type lineLimiter struct {
	mu         sync.Mutex
	lim        *rate.Limiter
	suppressed uint64 // lines held back since the last one let through
}

func newLineLimiter() lineLimiter {
	return lineLimiter{lim: rate.NewLimiter(logRate, logBurst)}
}

// allow says whether a line may be logged at now, and, if so, how many were
// held back since the last one that was.
func (l *lineLimiter) allow(now time.Time) (ok bool, suppressed uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lim.AllowN(now, 1) {
		l.suppressed++
		return false, 0
	}
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}
