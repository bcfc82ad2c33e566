package cluster

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
	advertise net.Addr
}

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
	if adv.Port == 0 {
		adv.Port = l.Addr().(*net.TCPAddr).Port
	}
	return &tcpStream{Listener: l, advertise: adv}, nil
}

func (s *tcpStream) Addr() net.Addr { return s.advertise }

func (s *tcpStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}
