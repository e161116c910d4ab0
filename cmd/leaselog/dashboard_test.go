package main

import (
	"net"
	"testing"
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
