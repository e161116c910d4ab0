package main

import (
	"net"
	"net/url"
	"strconv"

	"github.com/leaselog/leaselog/ui"
)

// dashboardURL is the link to the web dashboard of a daemon listening on
// addr, as serve logs it at start: with the admin token the daemon
// generated in its fragment (#token=…, as Jupyter prints its link), which
// the page moves into the tab's sessionStorage; a fragment is never sent to
// a server nor in a Referer. token is "" when the daemon is open or its
// tokens are those of [auth]: the page then asks for one. A unix socket has
// no link a browser can open: "".
func dashboardURL(addr net.Addr, token string) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return ""
	}
	ip := tcp.IP
	switch {
	case ip == nil || ip.IsUnspecified() && ip.To4() != nil:
		ip = net.IPv4(127, 0, 0, 1) // listening everywhere: this host's loopback opens it
	case ip.IsUnspecified():
		ip = net.IPv6loopback
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port)), Path: ui.Prefix}
	if token != "" {
		u.Fragment = "token=" + token
	}
	return u.String()
}
