package worker

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/leaselog/leaselog/api"
)

// What a worker reports when it loses a job. A loss is not an outcome of the
// job: the daemon folds a lost report exactly like an expiry (a run fails
// "worker lost", an evaluation is queued again), never as an attempt, so a
// job the worker could not see through is never counted against it. Partial
// results and refs are left out: they are not the job's.
const lost = "lost"

// Fenced is the outcome of a lease whose job the worker stopped itself: no
// heartbeat acknowledged for toleration − 2×renew.
func Fenced() Outcome {
	return Outcome{Outcome: lost, Reason: "self-fenced: no heartbeat acknowledged for toleration − 2×renew"}
}

// Lost is the outcome of a lease whose job cannot be found after a restart
// (err nil: its run directory is gone) or could not be re-attached.
func Lost(err error) Outcome {
	reason := "run directory gone: the job was lost while the worker was down"
	if err != nil {
		reason = "re-attach failed: " + err.Error()
	}
	return Outcome{Outcome: lost, Reason: reason}
}

// TooLate is the outcome of a lease whose grant came past its fence (Take):
// self-fenced, never started.
func TooLate() Outcome {
	return Outcome{Outcome: lost, Reason: "self-fenced: the grant arrived past its fence; not started"}
}

// NotStarted is the outcome of a lease whose job could not start.
func NotStarted(err error) Outcome {
	return Outcome{Outcome: "failed", Reason: "could not start: " + err.Error()}
}

// Retry reports whether a call that failed with err is to be sent again
// as it is: the daemon could not be reached or answered 5xx. A definite
// refusal (4xx) is not; for a report, Refused says what comes next.
func Retry(err error) bool { return api.Retryable(err) }

// Refusal is what a worker does about a report the daemon refused.
type Refusal int

const (
	// Final: the daemon will take no report of this lease from this worker —
	// it was stale (409 stale_lease: recorded for auditors), or the lease is
	// not the worker's (403, 404). Forget the lease.
	Final Refusal = iota + 1
	// Resend the report Refused returns in its place.
	Resend
	// Later: send the same report again after a backoff. The daemon does not
	// know the worker now (401: a token being rotated); the lease stays, and
	// heartbeats fail too until it does, so the fence falls as for any
	// silence.
	Later
	// Expire: nothing is left to leave out of a lost report the daemon
	// still refuses. Stop naming the lease: the daemon expires it, which it
	// folds exactly as a lost report.
	Expire
)

func (r Refusal) String() string {
	switch r {
	case Final:
		return "final"
	case Resend:
		return "resend"
	case Later:
		return "later"
	case Expire:
		return "expire"
	}
	return fmt.Sprintf("refusal(%d)", int(r))
}

// maxReason bounds the reason of a report sent again after a refusal, well
// under any limit a daemon sets (the daemon truncates long reasons itself;
// an older one refused them).
const maxReason = 512

// Refused says what a worker does when the daemon refused report o with err
// (an *api.Error; anything else is Later). A worker never forgets a lease
// because of a refusal about the report's content: it sends the report
// again, each time with less the daemon could object to, saying so in the
// reason —
//
//  1. without its result and ref, its reason cut to maxReason bytes and
//     prefixed with the refusal;
//  2. then, if that too is refused, as lost (the daemon folds it like an
//     expiry: never an attempt, an evaluation runs again);
//  3. and a lost report that is refused even so is left to expire (Expire).
//
// A daemon that took the report already (its answer was lost) answers step
// 1 with the first answer: the same outcome, and no result or ref to differ,
// is a retry of it. Step 2 on a lease it took is a late claim, another
// outcome: stale (kept for auditors), which ends the report (Final).
func Refused(o Outcome, err error) (next Outcome, do Refusal) {
	var e *api.Error
	if !errors.As(err, &e) {
		return o, Later
	}
	switch {
	case e.Code == api.CodeStaleLease:
		return Outcome{}, Final
	case e.Status == http.StatusForbidden || e.Status == http.StatusNotFound:
		return Outcome{}, Final
	case e.Status == http.StatusUnauthorized || e.Status >= 500:
		return o, Later
	}
	why := fmt.Sprintf("report refused (%d %s: %s)", e.Status, e.Code, cut(e.Message, 120))
	if o.Result != nil || o.Ref != "" || len(o.Reason) > maxReason || !utf8.ValidString(o.Reason) {
		next = Outcome{Outcome: o.Outcome, Reason: why + "; sent again without result and ref"}
		if o.Reason != "" {
			next.Reason += "; reason: " + o.Reason
		}
		next.Reason = cut(next.Reason, maxReason)
		return next, Resend
	}
	if o.Outcome != lost {
		return Outcome{Outcome: lost, Reason: cut(why+"; sent again as lost, was "+o.Outcome, maxReason)}, Resend
	}
	return Outcome{}, Expire
}

// cut returns s cut to at most n bytes of valid UTF-8, marked with "…" if it
// was cut.
func cut(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	const ell = "…"
	i := n - len(ell)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + ell
}
