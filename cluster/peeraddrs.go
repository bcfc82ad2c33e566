package cluster

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/rlnode/rlnode/cluster/storage"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/internal/boundedfile"
)

// peerAddrFile remembers the members' HTTP addresses across restarts. The
// clock check must read a majority of voters before this node may lead,
// and right after a restart the state machine may not hold the members'
// metadata yet (raft applies the log only once a leader tells it the
// commit index): without the file, a whole cluster restarted before its
// first snapshot could never elect anyone.
const peerAddrFile = "peer-http.json"

// peerAddrs is the cache, owned by the Node, and the members' IP
// addresses (refreshPeerIPs), which the Raft guard trusts.
type peerAddrs struct {
	mu    sync.Mutex
	path  string
	addrs map[string]string // id -> HTTP address
	ips   atomic.Pointer[map[string]bool]
}

func loadPeerAddrs(dataDir string) *peerAddrs {
	p := &peerAddrs{path: filepath.Join(dataDir, peerAddrFile), addrs: map[string]string{}}
	if b, err := boundedfile.Read(p.path, storage.MaxMetaFileBytes); err == nil {
		json.Unmarshal(b, &p.addrs) // a damaged cache is only a cache
	}
	return p
}

func (p *peerAddrs) get(id string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.addrs[id]
	return a, ok && a != ""
}

// merge adds addrs to the cache (a member's newer address replaces its
// older one; entries are never dropped, since only ids in the Raft
// configuration are looked up), writing it atomically when it changed; a
// failed write is retried on the next merge.
func (p *peerAddrs) merge(addrs map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := maps.Clone(p.addrs)
	maps.Copy(next, addrs)
	if maps.Equal(p.addrs, next) {
		return
	}
	b, _ := json.Marshal(next)
	tmp := p.path + ".tmp"
	if os.WriteFile(tmp, b, 0o644) != nil || os.Rename(tmp, p.path) != nil {
		return
	}
	p.addrs = next
}

// remember records the HTTP addresses the replicated metadata holds
// (but self's); the state machine calls it after applying node metadata
// or a snapshot.
func (p *peerAddrs) remember(self string, nodes map[string]fsm.Node) {
	addrs := map[string]string{}
	for id, meta := range nodes {
		if id != self && meta.HTTPAddr != "" {
			addrs[id] = meta.HTTPAddr
		}
	}
	if len(addrs) > 0 {
		p.merge(addrs)
	}
}

// trustedIP reports whether ip is a known peer's: its Raft handshakes do
// not count against the budget for strangers.
func (p *peerAddrs) trustedIP(ip string) bool {
	m := p.ips.Load()
	return m != nil && (*m)[ip]
}
