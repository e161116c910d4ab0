package server_test

// What the HTTP fuzzers send: requests built from the route table or read
// from raw bytes, and admitted only if net/http's server would hand them to
// a handler; and the checks that keep their seed corpora meaningful.

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/server"
)

// parseRequest reads one request from raw as net/http's server does, with
// the checks it makes before calling a handler. ok is false when the server
// would itself have refused it.
func parseRequest(raw []byte) (req *http.Request, ok bool) {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil || req.ProtoMajor != 1 {
		return nil, false
	}
	// ReadRequest drops the Host header, which the server checks: read the
	// header again for it.
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(raw)))
	if _, err := tp.ReadLine(); err != nil {
		return nil, false
	}
	head, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, false
	}
	hosts, haveHost := head["Host"]
	if req.ProtoAtLeast(1, 1) && (!haveHost || len(hosts) == 0) && req.Method != "CONNECT" {
		return nil, false
	}
	if len(hosts) == 1 && !validBytes(hosts[0], isHostByte) {
		return nil, false
	}
	for k, vs := range req.Header {
		if k == "" || !validBytes(k, isTokenByte) {
			return nil, false
		}
		for _, v := range vs {
			if !validBytes(v, func(c byte) bool { return c >= ' ' && c != 0x7f || c == '\t' }) {
				return nil, false
			}
		}
	}
	req.RemoteAddr = "192.0.2.1:7421"
	return req, true
}

func validBytes(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

func isTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func isHostByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!$%&'()*+,-.:;=[]_~", c) >= 0
}

// handlerRequest builds FuzzHandler's request: the route's pattern with seg
// for its parameter and query after it; method "" is the route's. who picks
// the server and the Authorization header: 0 an open server, sent token as
// it is (or nothing); 1-5 a server with auth and the token of fuzzTokens[who-1];
// anything else a server with auth, sent token as it is.
func handlerRequest(route uint8, method, seg, query string, who uint8, token, lastEventID, contentType string, body []byte) ([]byte, *server.Auth) {
	rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
	if method == "" {
		method = rt.method
	}
	target := rt.pattern
	if i, j := strings.IndexByte(target, '{'), strings.IndexByte(target, '}'); i >= 0 {
		target = target[:i] + escapeTarget(seg) + target[j+1:]
	}
	if query != "" {
		target += "?" + escapeTarget(query)
	}
	var auth *server.Auth
	switch {
	case who == 0:
	case int(who) <= len(fuzzTokens):
		auth, token = fuzzAuth(), "Bearer "+fuzzTokens[who-1]
	default:
		auth = fuzzAuth()
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: leaselog\r\n", method, target)
	for _, h := range [][2]string{{"Authorization", token}, {"Last-Event-ID", lastEventID}, {"Content-Type", contentType}} {
		if v := headerValue(h[1]); v != "" {
			fmt.Fprintf(&b, "%s: %s\r\n", h[0], v)
		}
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	return b.Bytes(), auth
}

// escapeTarget percent-encodes the bytes a request target cannot hold, so
// that a fuzzed segment or query makes a request, not a broken request line.
func escapeTarget(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '#' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// headerValue drops the bytes a header value cannot hold: net/http's server
// would refuse the request before any handler saw it.
func headerValue(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' && r != '\t' || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

// TestFuzzRoutesAreTheDocuments: the fuzzed routes are the operations of
// docs/openapi.yaml, which the server's other tests hold it to.
func TestFuzzRoutesAreTheDocuments(t *testing.T) {
	doc, _ := loadDoc(t)
	var documented, fuzzed []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	for i := range fuzzRoutes {
		fuzzed = append(fuzzed, fuzzRoutes[i].String())
	}
	// A worker session is an upgrade, which a recorded ServeHTTP cannot
	// make: its refusals are the route's rules, its frames are checked
	// against the HTTP calls' answers (TestSessionAnswersAreTheHTTPAnswers)
	// and its header parsing fuzzed (api.FuzzParseRequest).
	fuzzed = append(fuzzed, "GET /v1/session")
	slices.Sort(documented)
	slices.Sort(fuzzed)
	if !slices.Equal(documented, fuzzed) {
		t.Fatalf("fuzzed routes:\n%s\ndocumented operations:\n%s", strings.Join(fuzzed, "\n"), strings.Join(documented, "\n"))
	}
}

// TestFuzzSeedsReachEveryRoute: the seed corpus of each target has, for
// every route, an entry the route answers with a 2xx — seeds that only hit
// refusals would leave the fuzzer to find the handlers' real work by luck.
// It also shows (with -v) what each seed got.
func TestFuzzSeedsReachEveryRoute(t *testing.T) {
	for _, target := range []string{"FuzzHandler", "FuzzRequest"} {
		t.Run(target, func(t *testing.T) {
			files, err := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*"))
			if err != nil || len(files) == 0 {
				t.Fatalf("no seed corpus for %s: %v", target, err)
			}
			ok := map[*fuzzRoute]bool{}
			for _, file := range files {
				args := readCorpusFile(t, file)
				var raw []byte
				var auth *server.Auth
				if target == "FuzzHandler" {
					raw, auth = handlerRequest(args[0].(byte), args[1].(string), args[2].(string), args[3].(string), args[4].(byte),
						args[5].(string), args[6].(string), args[7].(string), args[8].([]byte))
				} else {
					raw = args[0].([]byte)
				}
				req, valid := parseRequest(raw)
				if !valid {
					t.Errorf("%s: not a request net/http would serve", file)
					continue
				}
				if _, ok := req.Header["Authorization"]; ok && target == "FuzzRequest" {
					auth = fuzzAuth()
				}
				rt, status := fuzzServe(t, auth != nil, req)
				t.Logf("%-28s %-40v %d", filepath.Base(file), rt, status)
				if status < 300 {
					ok[rt] = true
				}
			}
			for i := range fuzzRoutes {
				if !ok[&fuzzRoutes[i]] {
					t.Errorf("no seed of %s gets a 2xx from %v", target, &fuzzRoutes[i])
				}
			}
		})
	}
}

// readCorpusFile parses a file of Go's fuzz corpus format ("go test fuzz
// v1", then a value per line) holding the types these targets take.
func readCorpusFile(t *testing.T, file string) []any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: not a fuzz corpus file", file)
	}
	var out []any
	for _, l := range lines[1:] {
		typ, lit, ok := strings.Cut(strings.TrimSuffix(l, ")"), "(")
		var v any
		switch typ {
		case "string", "[]byte":
			s, err := strconv.Unquote(lit)
			if ok, v = ok && err == nil, s; typ == "[]byte" {
				v = []byte(s)
			}
		case "byte", "uint8":
			var n uint64
			var err error
			if strings.HasPrefix(lit, "'") {
				var r rune
				r, _, _, err = strconv.UnquoteChar(lit[1:len(lit)-1], '\'')
				n = uint64(r)
			} else {
				n, err = strconv.ParseUint(lit, 0, 8)
			}
			ok, v = ok && err == nil && n < 256, byte(n)
		default:
			ok = false
		}
		if !ok {
			t.Fatalf("%s: cannot read %q", file, l)
		}
		out = append(out, v)
	}
	return out
}
