package server

import (
	"net/http"
	"strings"

	"github.com/leaselog/leaselog/api"
)

// A browser's EventSource cannot send an Authorization header, so the event
// stream (and only it: a route with queryToken) also takes its token as the
// token query parameter: GET /v1/events/stream?token=TOKEN. A token in a URL
// is more exposed than one in a header (a proxy's access log, the browser's
// history), so the other routes refuse it as an unknown parameter, and the
// daemon's own logs record paths without their query. The header wins
// nowhere: a request that sends both is refused, so that a client never
// learns which of two tokens it was served under.

// tokenParam is the query parameter of the stream's token.
const tokenParam = "token"

// tokenOf returns the token a request to rt carries: its bearer token or,
// where rt allows it, its token parameter.
func tokenOf(r *http.Request, rt *route) (string, error) {
	header := r.Header.Values("Authorization")
	if !rt.queryToken {
		return bearer(header)
	}
	vs := r.URL.Query()[tokenParam]
	switch {
	case len(vs) == 0 && len(header) == 0:
		return "", refuseToken("missing token: send Authorization: Bearer TOKEN, or (an EventSource) ?token=TOKEN")
	case len(vs) == 0:
		return bearer(header)
	case len(header) > 0:
		return "", refuseToken("a token both in Authorization and in ?token=: send it once")
	case len(vs) > 1:
		return "", refuseToken("?token= given twice: send one token")
	case strings.TrimSpace(vs[0]) == "":
		return "", refuseToken("blank ?token=: send the token, or Authorization: Bearer TOKEN")
	}
	return strings.TrimSpace(vs[0]), nil
}

func refuseToken(msg string) error {
	return &api.Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthorized, Message: msg}
}
