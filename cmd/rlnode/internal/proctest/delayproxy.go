package proctest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// DelayProxy is a user-space TCP proxy on loopback that delays every byte
// by a fixed time in each direction (this kernel has no netem) and can
// cut the path: while cut, it forwards nothing in either direction and
// holds what it receives, as a partition does (callers time out rather
// than see a refused connection); Heal drops the held connections and
// forwards again.
type DelayProxy struct {
	Addr   string
	target string
	delay  time.Duration
	ln     net.Listener

	mu     sync.Mutex
	cut    bool
	closed bool
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

// StartDelayProxy listens on a free loopback port and forwards to target
// with delay each way; the test's cleanup stops it.
func StartDelayProxy(t testing.TB, target string, delay time.Duration) *DelayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("delay proxy: %v", err)
	}
	p := &DelayProxy{Addr: ln.Addr().String(), target: target, delay: delay, ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Cut stops forwarding: every connection, open or new, goes silent.
func (p *DelayProxy) Cut() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
}

// Heal closes the connections that went silent and forwards again.
func (p *DelayProxy) Heal() {
	p.mu.Lock()
	p.cut = false
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// isCut reports a cut that still holds (closing the proxy ends it).
func (p *DelayProxy) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut && !p.closed
}

func (p *DelayProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *DelayProxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
}

func (p *DelayProxy) accept() {
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

func (p *DelayProxy) serve(in net.Conn) {
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

// pump copies src to dst, each chunk sent delay after it was read (in
// order), and nothing while the path is cut.
func (p *DelayProxy) pump(dst io.Writer, src io.Reader) {
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{time.Now().Add(p.delay), buf[:n]}
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
