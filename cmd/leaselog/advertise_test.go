package main

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/api"
)

// TestAdvertised: the address a daemon advertises, from server.advertise,
// else server.listen, else (listen naming no host) the hostname.
func TestAdvertised(t *testing.T) {
	host := func() (string, error) { return "box1", nil }
	noHost := func() (string, error) { return "", errors.New("no hostname") }
	for _, tc := range []struct {
		listen, advertise string
		hostname          func() (string, error)
		want, err         string
	}{
		{listen: "127.0.0.1:7420", hostname: noHost, want: "127.0.0.1:7420"},
		{listen: "10.0.0.5:7420", hostname: host, want: "10.0.0.5:7420"},
		{listen: "box9.example:7420", hostname: host, want: "box9.example:7420"},
		{listen: ":7420", hostname: host, want: "box1:7420"},
		{listen: "0.0.0.0:7420", hostname: host, want: "box1:7420"},
		{listen: "[::]:7420", hostname: host, want: "box1:7420"},
		{listen: ":7420", advertise: "leaselog-a.example:7420", hostname: noHost, want: "leaselog-a.example:7420"},
		{listen: "unix:///run/leaselog.sock", hostname: host, want: "unix:///run/leaselog.sock"},
		{listen: ":7420", hostname: noHost, err: "server.advertise"},
	} {
		got, err := advertised(ServerConfig{Listen: tc.listen, Advertise: tc.advertise}, tc.hostname)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("listen %q advertise %q: %q, %v; want an error naming %s", tc.listen, tc.advertise, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("listen %q advertise %q: %q, %v; want %q", tc.listen, tc.advertise, got, err, tc.want)
		}
	}
}

// TestAdvertiseConfig: server.advertise parsed, and refused, naming the
// key, where no other machine could dial it.
func TestAdvertiseConfig(t *testing.T) {
	const auth = "\n[auth]\nadmin = [\"admin-token-0123456789\"]"
	c, err := ParseConfig("[server]\nlisten = \"0.0.0.0:7420\"\nadvertise = \"leaselog-a.example:7420\"" + auth)
	if err != nil || c.Validate() != nil || c.Server.Advertise != "leaselog-a.example:7420" {
		t.Fatalf("advertise parsed as %q: %v %v", c.Server.Advertise, err, c.Validate())
	}
	if a, err := c.Advertised(); err != nil || a != "leaselog-a.example:7420" {
		t.Fatalf("advertised %q, %v", a, err)
	}
	for _, text := range []string{
		"[server]\nadvertise = \"leaselog-a.example\"",
		"[server]\nadvertise = \":7420\"",
		"[server]\nadvertise = \"0.0.0.0:7420\"",
		"[server]\nadvertise = \"[::]:7420\"",
		"[server]\nadvertise = \"a.example:0\"",
		"[server]\nadvertise = \"a.example:http\"",
		"[server]\nadvertise = \"a.example:70000\"",
		"[server]\nlisten = \"unix:///run/leaselog.sock\"\nadvertise = \"a.example:7420\"",
	} {
		c, err := ParseConfig(text + auth)
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), "server.advertise") {
			t.Errorf("%q: %v, want an error naming server.advertise", text, err)
		}
	}
}

// TestJetStreamStandbyNamesAdvertised: a standby names the active daemon by
// the address it advertises, not the one it listens on, in its 503's
// Leaselog-Active and message; --advertise sets it as server.advertise does.
func TestJetStreamStandbyNamesAdvertised(t *testing.T) {
	ns := runNATS(t)
	text := jetStreamText(ns.ClientURL())
	const name = "leaselog-a.example:7420"
	dir := t.TempDir()
	cfg := filepath.Join(dir, "leaselog.toml")
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startProc(t, "active", "serve", "--config", cfg, "--data", filepath.Join(dir, "data"), "--advertise", name)
	waitListening(t, a)
	b := startStandby(t, "standby", t.TempDir(), text)
	addr := waitAddr(t, b, "standby: answering 503 until this daemon leads")
	res, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get(api.HeaderActive) != "http://"+name {
		t.Fatalf("the standby's /healthz: %d %s=%q, want 503 naming http://%s", res.StatusCode,
			api.HeaderActive, res.Header.Get(api.HeaderActive), name)
	}
}
