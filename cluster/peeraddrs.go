package cluster

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"sync"

	"github.com/rlnode/rlnode/cluster/storage"
	"github.com/rlnode/rlnode/internal/boundedfile"
)

// peerAddrFile remembers the members' HTTP addresses across restarts. The
// clock check must read a majority of voters before this node may lead,
// and right after a restart the state machine may not hold the members'
// metadata yet (raft applies the log only once a leader tells it the
// commit index): without the file, a whole cluster restarted before its
// first snapshot could never elect anyone.
const peerAddrFile = "peer-http.json"

// peerAddrs is the cache, owned by the Node.
type peerAddrs struct {
	mu    sync.Mutex
	path  string
	addrs map[string]string // id -> HTTP address
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

// peerHTTPAddr is the HTTP address of member id: from the replicated
// metadata, else the cache, else the bootstrap claim this node accepted.
func (n *Node) peerHTTPAddr(id string) (string, bool) {
	if meta, ok := n.fsm.Node(id); ok && meta.HTTPAddr != "" {
		return meta.HTTPAddr, true
	}
	if a, ok := n.peerAddrs.get(id); ok {
		return a, true
	}
	if c, err := n.boot.readClaim(); err == nil && c != nil {
		for _, m := range c.Members {
			if m.ID == id && m.HTTPAddr != "" {
				return m.HTTPAddr, true
			}
		}
	}
	return "", false
}

// rememberPeerAddrs records the HTTP addresses the replicated metadata
// holds; the state machine calls it after applying node metadata or a
// snapshot.
func (n *Node) rememberPeerAddrs() {
	addrs := map[string]string{}
	for id, meta := range n.fsm.Nodes() {
		if id != n.cfg.ID && meta.HTTPAddr != "" {
			addrs[id] = meta.HTTPAddr
		}
	}
	if len(addrs) > 0 {
		n.peerAddrs.merge(addrs)
	}
}
