// Package delayproxy is a user-space TCP proxy for tests on one machine
// (this kernel has no netem): it delays every byte by a time in each
// direction, can change that time while it runs (a delay spike), and can
// cut the path. cmd/rlnode's process tests (through proctest) and
// jepsen-lite's multi-cluster mode put it on region-to-parent paths.
package delayproxy

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy listens on a loopback port and forwards to one target. While
// cut, it forwards nothing in either direction and holds what it
// receives, as a partition does (callers time out rather than see a
// refused connection); Heal drops the held connections and forwards
// again. Close stops it and waits for every goroutine it started.
type Proxy struct {
	// Addr is the proxy's listening address (host:port).
	Addr   string
	target string
	ln     net.Listener

	mu     sync.Mutex
	delay  time.Duration
	cut    bool
	closed bool
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

// Start listens on a free port of 127.0.0.1 and forwards to target with
// delay each way.
func Start(target string, delay time.Duration) (*Proxy, error) {
	return StartOn("127.0.0.1:0", target, delay)
}

// StartOn is Start on a given listening address (a loopback one).
func StartOn(listen, target string, delay time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("delay proxy to %s: %w", target, err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, delay: delay, ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Cut stops forwarding: every connection, open or new, goes silent.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
}

// Heal closes the connections that went silent and forwards again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// SetDelay changes the delay of every byte read from now on, each way
// (bytes already queued keep theirs; order is kept).
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Delay is the current delay each way.
func (p *Proxy) Delay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// isCut reports a cut that still holds (closing the proxy ends it).
func (p *Proxy) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut && !p.closed
}

// Close stops listening, drops every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(in, true)
		p.wg.Add(1)
		go p.serve(in)
	}
}

func (p *Proxy) serve(in net.Conn) {
	defer p.wg.Done()
	defer p.track(in, false)
	defer in.Close()
	out, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		return
	}
	p.track(out, true)
	defer p.track(out, false)
	defer out.Close()
	done := make(chan struct{}, 2)
	go func() { p.pump(out, in); done <- struct{}{} }()
	go func() { p.pump(in, out); done <- struct{}{} }()
	<-done
	in.Close()
	out.Close()
	<-done
}

type chunk struct {
	at   time.Time
	data []byte
}

// pump copies src to dst, each chunk sent the delay after it was read
// (in order), and nothing while the path is cut.
func (p *Proxy) pump(dst io.Writer, src io.Reader) {
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{time.Now().Add(p.Delay()), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.at))
		for p.isCut() {
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := dst.Write(c.data); err != nil {
			for range q {
			}
			return
		}
	}
}
