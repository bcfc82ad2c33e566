package transport

import (
	"slices"
	"time"
)

// pendingSet is the Raft port's connections still in their handshake
// (unauthenticated), per remote address, oldest first. Two budgets bound
// it, so silent sockets cost a bounded number of file descriptors however
// many source addresses they come from:
//
//   - per address, MaxConnsPerIP: the address's oldest gives way;
//   - in total, MaxPending over every address not known as a peer: the
//     oldest connection of the address holding the most gives way, so a
//     flood from many addresses evicts its own sockets first and a peer
//     with one handshake in flight keeps it.
//
// Connections from known peers (members' addresses, Trusted) count only
// against their own address's cap: strangers never crowd them out.
//
// It is not safe for concurrent use; the guard holds its lock.
type pendingSet struct {
	perIP, total int
	byIP         map[string][]*countedConn
	strangers    int // pending connections from addresses not trusted
}

func newPendingSet(perIP, total int) *pendingSet {
	return &pendingSet{perIP: perIP, total: total, byIP: map[string][]*countedConn{}}
}

// add records c and returns the connections it evicts (marked evicted).
func (p *pendingSet) add(c *countedConn) (evicted []*countedConn) {
	list := p.byIP[c.ip]
	if len(list) >= p.perIP {
		evicted = append(evicted, p.evictOldest(c.ip))
		list = p.byIP[c.ip]
	}
	p.byIP[c.ip] = append(list, c)
	if !c.trusted {
		p.strangers++
	}
	for p.strangers > p.total {
		ip := p.fullestStranger()
		if ip == "" {
			break
		}
		evicted = append(evicted, p.evictOldest(ip))
	}
	return evicted
}

// fullestStranger is the untrusted address with the most pending
// connections (ties: the one whose oldest is oldest).
func (p *pendingSet) fullestStranger() string {
	best, bestN := "", 0
	var bestAt time.Time
	for ip, list := range p.byIP {
		if len(list) == 0 || list[0].trusted {
			continue
		}
		if n := len(list); n > bestN || (n == bestN && list[0].at.Before(bestAt)) {
			best, bestN, bestAt = ip, n, list[0].at
		}
	}
	return best
}

func (p *pendingSet) evictOldest(ip string) *countedConn {
	old := p.byIP[ip][0]
	p.drop(old)
	old.evicted = true
	return old
}

// drop removes c (if still pending).
func (p *pendingSet) drop(c *countedConn) {
	list := p.byIP[c.ip]
	i := slices.Index(list, c)
	if i < 0 {
		return
	}
	list = slices.Delete(list, i, i+1)
	if !c.trusted {
		p.strangers--
	}
	if len(list) == 0 {
		delete(p.byIP, c.ip)
	} else {
		p.byIP[c.ip] = list
	}
}

// all returns every pending connection.
func (p *pendingSet) all() []*countedConn {
	var out []*countedConn
	for _, list := range p.byIP {
		out = append(out, list...)
	}
	return out
}
