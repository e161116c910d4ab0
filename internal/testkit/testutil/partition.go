package testutil

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Partition is a TCP proxy to each of a set of servers that a test cuts
// (every connection through it closed, new ones closed as they come) and
// heals, all together: a client that reaches the servers only through it
// is cut off from every one of them, as by a network partition.
type Partition struct {
	lns   []net.Listener
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

// NewPartition starts a proxy to each target (host:port), healed; the
// test's end cuts it.
func NewPartition(t testing.TB, targets ...string) *Partition {
	t.Helper()
	p := &Partition{}
	for _, target := range targets {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p.lns = append(p.lns, ln)
		t.Cleanup(func() { ln.Close() })
		go p.proxy(ln, target)
	}
	t.Cleanup(func() { p.SetCut(true) })
	return p
}

// proxy forwards each connection ln accepts to target, while not cut.
func (p *Partition) proxy(ln net.Listener, target string) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		// Checked with the connection kept under one lock: one accepted as
		// the cut comes is closed by the cut or here, never left through.
		p.mu.Lock()
		cut := p.cut
		if !cut {
			p.conns = append(p.conns, in, out)
		}
		p.mu.Unlock()
		if cut {
			in.Close()
			out.Close()
			continue
		}
		go func() { _, _ = io.Copy(out, in); out.Close() }()
		go func() { _, _ = io.Copy(in, out); in.Close() }()
	}
}

// Addrs are the proxies' addresses (host:port), one per target, in order.
func (p *Partition) Addrs() []string {
	addrs := make([]string, len(p.lns))
	for i, ln := range p.lns {
		addrs[i] = ln.Addr().String()
	}
	return addrs
}

// SetCut cuts the partition (closing every connection through it) or heals
// it.
func (p *Partition) SetCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}
