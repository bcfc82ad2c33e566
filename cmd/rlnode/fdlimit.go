package main

import (
	"fmt"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/rlnode/rlnode/cluster/transport"
)

// File descriptors. Every port's connections come out of one process
// limit, shared with the Raft stores, snapshots and TLS reloads. The node
// raises its soft limit to the hard one at start and splits it: first a
// reserve for the Raft port (strangers' handshakes, MaxPending, their
// admitted connections, MaxConns, and members' connections) and the node's own files, then the HTTP port (and
// a third of the rest for gRPC when on), each capped at its constant. A
// flood on one port meets that port's budget, never EMFILE on another.
const (
	fdReserveFiles = 256 // stores, snapshots, TLS files, logs, outgoing peer connections
	fdReservePeers = 4   // members' addresses whose Raft connections are reserved (a five-node cluster)
	fdMinPortCap   = 64
)

// fdBudget is the split of the descriptor limit.
type fdBudget struct {
	soft, hard uint64
	raft       int // reserved for the Raft port
	http, grpc int // connection caps
	httpWant   int // --http-max-conns, before it was fitted
}

// raiseFileLimit sets the soft RLIMIT_NOFILE to the hard one (Go does the
// same at start on Linux; doing it here makes it explicit and logged).
func raiseFileLimit() (soft, hard uint64, err error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, 0, err
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return 0, 0, err
		}
	}
	return uint64(l.Cur), uint64(l.Max), nil
}

// planFDs splits limit between the ports; httpCap is --http-max-conns.
func planFDs(soft, hard uint64, limits transport.RaftLimits, grpc bool, httpCap int) fdBudget {
	b := fdBudget{soft: soft, hard: hard, raft: limits.MaxPending + limits.MaxConns + fdReservePeers*limits.MaxConnsPerIP, httpWant: httpCap}
	rest := int(min(soft, 1<<30)) - b.raft - fdReserveFiles
	grpcShare := 0
	if grpc {
		grpcShare = rest / 3
	}
	b.http = max(fdMinPortCap, min(httpCap, rest-grpcShare))
	b.grpc = max(fdMinPortCap, min(maxGRPCConns, grpcShare))
	return b
}

// logFDs says what the limit became and how it is split, and warns when
// it is too small for the full caps.
func (b fdBudget) log(log hclog.Logger, grpc bool) {
	args := []any{"soft", b.soft, "hard", b.hard, "raft_reserved", b.raft, "http_conns", b.http}
	if grpc {
		args = append(args, "grpc_conns", b.grpc)
	}
	log.Info("file descriptor limit", args...)
	need := b.httpWant + b.raft + fdReserveFiles
	if grpc {
		need += maxGRPCConns
	}
	if b.soft < uint64(need) {
		log.Warn(fmt.Sprintf("the file descriptor limit is low: port caps reduced to fit it (give the node at least %d, e.g. LimitNOFILE= in systemd)", need), args...)
	}
}
