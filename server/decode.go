package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/leaselog/leaselog/api"
)

// errBodyTimeout is a body that did not arrive within Options.BodyTimeout.
var errBodyTimeout = errors.New("server: request body not received in time")

// body is a request body read under a deadline: the connection's read
// deadline, set when the headers were read. net/http lifts it itself once the
// body is read to its end, as it starts the background read that notices a
// client hanging up during a long-poll or a stream. Only the request's
// goroutine reads it.
type body struct {
	io.ReadCloser
	timeout time.Duration
	ended   bool // read to its end
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.ended = true
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		err = fmt.Errorf("%w (%v)", errBodyTimeout, b.timeout)
	}
	return n, err
}

// pending reports whether the request has a body not read to its end: an
// answer given now must close the connection rather than wait for the rest.
func (c *call) pending() bool { return c.body != nil && !c.body.ended }

// watchBody puts r's body, if it has one, under the body deadline. A writer
// that has no connection (a test's recorder) has no deadline either.
func (s *Server) watchBody(w http.ResponseWriter, r *http.Request, c *call) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return
	}
	// A socket's deadline: real time, not the injected clock.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	c.body = &body{ReadCloser: r.Body, timeout: s.opts.BodyTimeout}
	r.Body = c.body
}

// hangUp makes the answer being written the connection's last, without
// reading what is left of the request: Connection: close, and a read
// deadline in the past so that net/http, which would read up to 256 KiB of an
// unread body before closing, gives up at once. Called before the status line
// is written. Over HTTP/1.1 the server then takes the connection and closes
// it lingering (linger.go), so that the client reads the answer.
func hangUp(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0))
}

// decodeBody reads the request body into v, strictly: one JSON object, no
// field v does not have, nothing after it, valid UTF-8, no key twice in an
// object, nested at most MaxDepth deep. An empty body is the empty object
// when emptyOK, else an error. The Content-Type is not checked: curl -d
// sends a form type, and the body says what it is.
func decodeBody(r *http.Request, v any, emptyOK bool) error {
	buf := bodyBuffers.Get().(*[]byte)
	defer putBodyBuffer(buf)
	b, err := readBody(r, buf)
	if err != nil {
		return err
	}
	return decodeJSON(b, v, emptyOK)
}

// readBody reads r's body whole into buf, which the caller returns to
// bodyBuffers once done with the bytes.
func readBody(r *http.Request, buf *[]byte) ([]byte, error) {
	b, err := readAll(r.Body, (*buf)[:0])
	*buf = b[:0]
	if err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			return nil, tooLargeError(tooLarge.Limit)
		case errors.Is(err, errBodyTimeout):
			return nil, bodyTimeoutError(err)
		}
		return nil, badRequest("read body: %v", err)
	}
	return b, nil
}

// tooLargeError is the answer to a body over the limit, over HTTP or in a
// session's frame.
func tooLargeError(limit int64) *api.Error {
	return &api.Error{Status: http.StatusBadRequest, Code: api.CodeTooLarge,
		Message: fmt.Sprintf("body exceeds %d bytes", limit)}
}

// bodyTimeoutError is the answer to a body that did not arrive in time.
func bodyTimeoutError(err error) *api.Error {
	return &api.Error{Status: http.StatusRequestTimeout, Code: api.CodeBodyTimeout,
		Message: "the body did not arrive in time: " + err.Error()}
}

// decodeJSON decodes b, a whole body, into v with decodeBody's rules: the
// one decoder of the HTTP calls and of a session's frames.
func decodeJSON(b []byte, v any, emptyOK bool) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		if emptyOK {
			return nil
		}
		return badRequest("missing body: want a JSON object")
	}
	if b[0] != '{' {
		return badRequest("body must be a JSON object")
	}
	// Before any decoder, whose state grows with the depth: a body of 1 MiB
	// could nest a million levels.
	if err := checkDepth(b); err != nil {
		return err
	}
	// The common body, one that obeys every rule, is decoded in one pass by
	// encoding/json/v2, whose rules are these: valid UTF-8, no name twice,
	// no member v lacks, nothing after the object. What it accepts,
	// encoding/json accepts with the same values (it is the stricter of the
	// two: it matches names by case, where v1 also takes "Worker" for
	// "worker"). Only a body it refuses takes the path below, which says
	// what is wrong in the words the API has always used, or accepts what
	// only v1's looser matching takes.
	if jsonv2.Unmarshal(b, v, jsonv2.RejectUnknownMembers(true)) == nil {
		return nil
	}
	reflect.ValueOf(v).Elem().SetZero() // what the refused decode left half-set
	return decodeObject(b, v)
}

// MaxDepth is how deeply a body's objects and arrays may nest, the body
// itself being the first level: a job's spec or a report's result, free
// JSON, may itself be 99 levels deep (97 in a batch). A body that nests
// deeper is refused before any decoder reads it.
const MaxDepth = 100

// checkDepth refuses a body whose objects and arrays nest deeper than
// MaxDepth, in one pass over its bytes that allocates nothing. Brackets in
// strings are not counted; a body that is not JSON is left to the decoders,
// which stop at its first syntax error.
func checkDepth(b []byte) error {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{', '[':
			if depth++; depth > MaxDepth {
				return badRequest("body: objects and arrays nested more than %d deep (at byte %d)", MaxDepth, i)
			}
		case '}', ']':
			depth = max(depth-1, 0) // a bracket too many is a syntax error, not credit for more depth
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++ // the escaped byte, a quote perhaps
				}
			}
		}
	}
	return nil
}

// decodeObject decodes b, a body that starts with '{', into v with
// encoding/json and the checks it lacks, saying what is wrong.
func decodeObject(b []byte, v any) error {
	if err := checkJSON(b); err != nil {
		return err
	}
	// v holds nothing of b (encoding/json copies strings and raw
	// messages), so b's buffer is used again by the next request.
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return badRequest("body: field %q: want %s, got JSON %s", typeErr.Field, jsonType(typeErr.Type), typeErr.Value)
		}
		return badRequest("body: %s", trimJSONPrefix(err.Error()))
	}
	if d.InputOffset() < int64(len(b)) {
		return badRequest("body: trailing data after the JSON object")
	}
	return nil
}

// bodyBuffers holds the buffers request bodies are read into: a call's body
// is read whole, decoded, and dropped, and most are under a kilobyte.
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// putBodyBuffer returns a buffer to the pool, unless a large body grew it:
// the pool keeps what the common call needs, not the largest body seen. A
// large one is emptied, so that whatever still holds b pins none of it.
func putBodyBuffer(b *[]byte) {
	if cap(*b) > 64<<10 {
		*b = nil
		return
	}
	bodyBuffers.Put(b)
}

// holdBody makes b's bytes the call's body (c.in), which the call gives
// back with releaseBody.
func (c *call) holdBody(b *[]byte) { c.in, c.inBuf = *b, b }

// releaseBody gives the call's body buffer back to the pool, once: a long
// poll does so as soon as it has decoded its body, so that its wait pins
// none of the body's bytes; c.in must not be read after.
func (c *call) releaseBody() {
	if c.inBuf != nil {
		putBodyBuffer(c.inBuf)
		c.in, c.inBuf = nil, nil
	}
}

// readAll is io.ReadAll into buf.
func readAll(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// checkJSON refuses what encoding/json would take quietly and get wrong:
// invalid UTF-8, which it turns into U+FFFD, and a key given twice in one
// object, of which it keeps the last — in a spec, stored canonical, the other
// would be lost without a word. A syntax error is left to the decoder, which
// says it better. It allocates nothing for a body of small objects with
// plain keys (a key with an escape, an object of many keys, a refusal do).
func checkJSON(b []byte) error {
	if !utf8.Valid(b) {
		off := 0
		for off < len(b) {
			r, n := utf8.DecodeRune(b[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return badRequest("body: invalid UTF-8 at byte %d", off)
	}
	if !json.Valid(b) {
		return checkTokens(b)
	}
	var (
		frameArr [8]dupFrame
		keyArr   [32][]byte
		frames   = frameArr[:0]
		keys     = keyArr[:0]
		last     []byte // the key read last: the name of an object or array it opens
		wantKey  bool   // in an object, after { or ,
	)
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{', '[':
			f := dupFrame{obj: b[i] == '{', keys: len(keys)}
			if n := len(frames); n > 0 && frames[n-1].obj {
				f.name = last
			}
			frames, wantKey = append(frames, f), f.obj
		case '}', ']':
			f := &frames[len(frames)-1]
			keys, frames, wantKey = keys[:f.keys], frames[:len(frames)-1], false
		case ',':
			wantKey = frames[len(frames)-1].obj
		case '"':
			j, escaped := i+1, false
			for ; b[j] != '"'; j++ {
				if b[j] == '\\' {
					escaped, j = true, j+1
				}
			}
			if wantKey {
				k := b[i+1 : j]
				if escaped {
					var ks string
					_ = json.Unmarshal(b[i:j+1], &ks) // valid JSON: a valid string
					k = []byte(ks)
				}
				f := &frames[len(frames)-1]
				if f.has(keys[f.keys:], k) {
					return badRequest("body: key %q given twice in %s", k, dupPath(frames))
				}
				keys, last, wantKey = append(keys, k), k, false
			}
			i = j
		}
	}
	return nil
}

// checkTokens is checkJSON's scan token by token, for a body that is not
// valid JSON: a key given twice before the syntax error is named as such,
// the syntax error left to the decoder. It keeps what checkJSON keeps, the
// keys of the open objects and the name of each, and builds a path only for
// its message: its work and memory grow with the body, whatever its shape.
func checkTokens(b []byte) error {
	var (
		frames  []dupFrame
		keys    [][]byte
		last    []byte // the key read last: the name of an object or array it opens
		wantKey bool   // the next string is a key: in an object, after { or a value
	)
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // a number too big for a float64 is still JSON
	for {
		tok, err := d.Token()
		if err != nil {
			return nil // io.EOF, or a syntax error the decoder will name
		}
		if k, ok := tok.(string); ok && wantKey {
			kb := []byte(k)
			f := &frames[len(frames)-1]
			if f.has(keys[f.keys:], kb) {
				return badRequest("body: key %q given twice in %s", k, dupPath(frames))
			}
			keys, last, wantKey = append(keys, kb), kb, false
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			f := dupFrame{obj: tok == json.Delim('{'), keys: len(keys)}
			if n := len(frames); n > 0 && frames[n-1].obj {
				f.name = last
			}
			frames, wantKey = append(frames, f), f.obj
			continue
		case json.Delim('}'), json.Delim(']'):
			f := &frames[len(frames)-1]
			keys, frames = keys[:f.keys], frames[:len(frames)-1]
		}
		// A value ended: in an object, a key comes next.
		wantKey = len(frames) > 0 && frames[len(frames)-1].obj
	}
}

// dupFrame is an open object or array of the body checkJSON scans.
type dupFrame struct {
	obj  bool
	keys int    // where this object's keys start in the scan's keys
	name []byte // the key it is the value of, if in an object
	// many holds the keys of an object past manyKeys, looked up by hash.
	many map[string]struct{}
}

// manyKeys is where an object's keys go from a list to a map: a body of
// 1 MiB could hold an object of 100k keys.
const manyKeys = 16

// has reports whether k is among the keys of f (seen, the keys read in f so
// far), and adds it to f's map once f has many.
func (f *dupFrame) has(seen [][]byte, k []byte) bool {
	if f.many != nil {
		if _, ok := f.many[string(k)]; ok {
			return true
		}
		f.many[string(k)] = struct{}{}
		return false
	}
	for _, s := range seen {
		if bytes.Equal(s, k) {
			return true
		}
	}
	if len(seen)+1 >= manyKeys {
		f.many = make(map[string]struct{}, 2*manyKeys)
		for _, s := range seen {
			f.many[string(s)] = struct{}{}
		}
		f.many[string(k)] = struct{}{}
	}
	return false
}

// dupPath names the innermost open object of frames for a message: "the
// body", or its path from the body, as "spec.env[]". It is built once, for
// the message, in one pass.
func dupPath(frames []dupFrame) string {
	var path strings.Builder
	for i := 1; i < len(frames); i++ {
		if !frames[i-1].obj {
			path.WriteString("[]")
			continue
		}
		if path.Len() > 0 {
			path.WriteByte('.')
		}
		path.Write(frames[i].name)
	}
	if path.Len() == 0 {
		return "the body"
	}
	return path.String()
}

// params returns the query parameters of r. A parameter not in allowed, or
// given twice, is refused rather than ignored: a typo like ?status= must not
// quietly list everything.
func params(r *http.Request, allowed ...string) (map[string]string, error) {
	if r.URL.RawQuery == "" {
		return nil, nil // most calls: nothing to parse (a nil map reads as empty)
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("query: %v", err)
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the same query always names the same problem
	out := make(map[string]string, len(q))
	for _, k := range keys {
		switch {
		case !slices.Contains(allowed, k):
			if len(allowed) == 0 {
				return nil, badRequest("unknown query parameter %q: this call takes none", k)
			}
			return nil, badRequest("unknown query parameter %q (want %s)", k, strings.Join(allowed, ", "))
		case len(q[k]) > 1:
			return nil, badRequest("query parameter %q given %d times", k, len(q[k]))
		}
		out[k] = q[k][0]
	}
	return out, nil
}

// jsonType names what a Go type takes, in JSON's words.
func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(jsonType(t.Elem()), "a "), "an ") + "s"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a JSON value"
}

// trimJSONPrefix drops encoding/json's "json: " from a message meant for a
// client that never heard of Go.
func trimJSONPrefix(msg string) string {
	if len(msg) > 6 && msg[:6] == "json: " {
		return msg[6:]
	}
	return msg
}
