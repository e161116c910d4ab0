package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
)

// The advertised address is where other machines reach this daemon: what a
// daemon of engine = "jetstream" puts in the stream's leadership key, so
// that a standby's 503 names the active daemon (Leaselog-Active) by an
// address a worker lists (docs/cluster.md §3). [server] advertise sets it;
// by default it is server.listen when listen names a host, and, when it
// names none (":7420", "0.0.0.0:7420", "[::]:7420": every interface), the
// machine's hostname with listen's port: the one name a daemon knows it has
// without asking the network, and the one an operator is likeliest to list.
// A daemon reached by another name (a DNS name, a load balancer's) sets
// advertise.

// Advertised returns the address this daemon advertises (see above); an
// error names server.advertise when it has to be set.
func (c Config) Advertised() (string, error) {
	return advertised(c.Server, os.Hostname)
}

func advertised(s ServerConfig, hostname func() (string, error)) (string, error) {
	if s.Advertise != "" {
		return s.Advertise, nil
	}
	network, addr, err := splitListen(s.Listen)
	if err != nil || network != "tcp" {
		return s.Listen, err // a unix socket: only local clients reach it anyway
	}
	host, port, _ := net.SplitHostPort(addr)
	if !unspecified(host) {
		return addr, nil
	}
	name, err := hostname()
	if err == nil && name == "" {
		err = errors.New("it is empty")
	}
	if err != nil {
		return "", fmt.Errorf("config: server.advertise: server.listen %s names no host and the machine's hostname is unknown (%v): set server.advertise to the host:port others reach this daemon at", s.Listen, err)
	}
	return net.JoinHostPort(name, port), nil
}

// unspecified says whether host stands for every interface of the machine
// ("", 0.0.0.0, ::): an address to listen on, not one to reach.
func unspecified(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// checkAdvertise checks server.advertise: a host:port another machine can
// dial, given only with a TCP listen address.
func (s ServerConfig) checkAdvertise() error {
	if s.Advertise == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(s.Advertise)
	if err != nil {
		return fmt.Errorf("config: server.advertise: %q is not host:port: %v", s.Advertise, err)
	}
	if unspecified(host) {
		return fmt.Errorf("config: server.advertise: %q names no host others can reach (it is where to listen, not where to connect)", s.Advertise)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("config: server.advertise: %q: the port must be 1 to 65535", s.Advertise)
	}
	if network, _, _ := splitListen(s.Listen); network == "unix" {
		return fmt.Errorf("config: server.advertise: the daemon listens on a unix socket (server.listen %s), which no other machine reaches", s.Listen)
	}
	return nil
}
