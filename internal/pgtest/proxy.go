package pgtest

import (
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// CutProxy is a TCP proxy on loopback in front of the test server that,
// while armed, cuts each connection at its client's first extended-protocol
// query (a Parse message): the connection is made and answers a simple
// query (pgx's ping), then fails mid-use, as when a server crashes or the
// network resets while a client opens its store. It needs sslmode=disable
// (it reads the protocol's messages).
type CutProxy struct {
	armed atomic.Bool
	ln    net.Listener
	wg    sync.WaitGroup
}

// NewCutProxy starts a CutProxy, disarmed, in front of the server of dsn,
// stopped when the test ends, and returns it and dsn pointed at it (host and
// port replaced, sslmode=disable).
func NewCutProxy(t testing.TB, dsn string) (*CutProxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CutProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.serve(c, target)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
	})
	u.Host = ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return p, u.String()
}

// Arm makes the proxy cut every connection at its next Parse message (on)
// or pass everything (off).
func (p *CutProxy) Arm(on bool) { p.armed.Store(on) }

func (p *CutProxy) serve(client net.Conn, target string) {
	defer client.Close()
	server, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer server.Close()
	go func() {
		io.Copy(client, server)
		client.Close()
	}()
	// The startup message: a length (itself included), no type byte.
	var n [4]byte
	if _, err := io.ReadFull(client, n[:]); err != nil {
		return
	}
	size := binary.BigEndian.Uint32(n[:])
	if size < 4 {
		return
	}
	if _, err := server.Write(n[:]); err != nil {
		return
	}
	if _, err := io.CopyN(server, client, int64(size-4)); err != nil {
		return
	}
	// Then messages: a type byte and a length (itself included).
	var h [5]byte
	for {
		if _, err := io.ReadFull(client, h[:]); err != nil {
			return
		}
		size := binary.BigEndian.Uint32(h[1:])
		if size < 4 {
			return
		}
		if h[0] == 'P' && p.armed.Load() {
			return // cut: both ends closed
		}
		if _, err := server.Write(h[:]); err != nil {
			return
		}
		if _, err := io.CopyN(server, client, int64(size-4)); err != nil {
			return
		}
	}
}
