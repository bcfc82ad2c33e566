package transport

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// tcpStream is a raft.StreamLayer over plain TCP, the same thing raft's
// NewTCPTransport builds, made here so a test harness can wrap it.
type tcpStream struct {
	net.Listener
	advertise advertiseAddr
}

// advertiseAddr keeps the advertise address as configured: a DNS name
// (e.g. a compose service) must stay a name in the Raft configuration, not
// be frozen to the IP it resolved to at start.
type advertiseAddr string

func (a advertiseAddr) Network() string { return "tcp" }
func (a advertiseAddr) String() string  { return string(a) }

// ListenTCP opens the Raft listener. advertise is the address peers dial; it
// must be a concrete address (not 0.0.0.0).
func ListenTCP(bind, advertise string) (raft.StreamLayer, error) {
	adv, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, fmt.Errorf("resolve raft advertise address %q: %w", advertise, err)
	}
	if adv.IP == nil || adv.IP.IsUnspecified() {
		return nil, fmt.Errorf("raft advertise address %q is not an address peers can dial; set --raft-advertise", advertise)
	}
	l, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("listen for raft on %s: %w", bind, err)
	}
	addr := advertise
	if adv.Port == 0 {
		// Tests bind port 0: advertise the port actually bound.
		host, _, _ := net.SplitHostPort(advertise)
		addr = net.JoinHostPort(host, fmt.Sprint(l.Addr().(*net.TCPAddr).Port))
	}
	return &tcpStream{Listener: l, advertise: advertiseAddr(addr)}, nil
}

func (s *tcpStream) Addr() net.Addr { return s.advertise }

func (s *tcpStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}
