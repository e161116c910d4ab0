package main

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDashboardURL(t *testing.T) {
	for _, tc := range []struct {
		addr  net.Addr
		token string
		want  string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7420}, "", "http://127.0.0.1:7420/ui/"},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7420}, "0123456789abcdef", "http://127.0.0.1:7420/ui/#token=0123456789abcdef"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 80}, "", "http://127.0.0.1:80/ui/"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 80}, "", "http://[::1]:80/ui/"},
		{&net.TCPAddr{IP: net.ParseIP("10.0.0.7"), Port: 9}, "t", "http://10.0.0.7:9/ui/#token=t"},
		{&net.UnixAddr{Name: "/run/leaselog.sock", Net: "unix"}, "t", ""},
	} {
		if got := dashboardURL(tc.addr, tc.token); got != tc.want {
			t.Errorf("dashboardURL(%v, %q) = %q, want %q", tc.addr, tc.token, got, tc.want)
		}
	}
}

// serve logs the dashboard's link at start, with the admin token it
// generated in the fragment: the link opens the dashboard, and its token
// reads the API.
func TestServeLogsDashboardLink(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 1)
	var link string
	deadline := time.Now().Add(10 * time.Second)
	for link == "" {
		for _, line := range strings.Split(d.output(), "\n") {
			var l struct{ Message, URL string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Message == "dashboard" {
				link = l.URL
			}
		}
		if link == "" && time.Now().After(deadline) {
			t.Fatalf("serve logged no dashboard link:\n%s", d.output())
		}
		if link == "" {
			time.Sleep(10 * time.Millisecond) // polling the log with a deadline
		}
	}
	page, token, ok := strings.Cut(link, "#token=")
	want, err := os.ReadFile(filepath.Join(dir, "data", "token"))
	if err != nil {
		t.Fatal(err)
	}
	if !ok || page != d.url+"/ui/" || token != strings.TrimSpace(string(want)) {
		t.Fatalf("dashboard link %q: want %s/ui/#token= and the token of data/token", link, d.url)
	}
	rs, err := http.Get(page)
	if err != nil {
		t.Fatal(err)
	}
	rs.Body.Close()
	if rs.StatusCode != http.StatusOK || !strings.HasPrefix(rs.Header.Get("Content-Type"), "text/html") {
		t.Errorf("GET %s: %d %s, want the page", page, rs.StatusCode, rs.Header.Get("Content-Type"))
	}
	rq, _ := http.NewRequest("GET", d.url+"/v1/jobs", nil)
	rq.Header.Set("Authorization", "Bearer "+token)
	rs, err = http.DefaultClient.Do(rq)
	if err != nil {
		t.Fatal(err)
	}
	rs.Body.Close()
	if rs.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/jobs with the link's token: %d", rs.StatusCode)
	}
}
