package cluster

import (
	"context"
	"sync/atomic"

	"github.com/rlnode/rlnode/topkeys"
)

// Views are an operator's views of this node and of the whole cluster:
// this node's disk use and snapshot failures (metrics), every member's
// status (GET /v1/cluster/members) and the cluster's top keys (GET
// /v1/top), the last two collected from every member over the internal
// path. They read the node through narrow interfaces (viewLocal,
// viewMembers, viewPeers), so they are not part of Node; the front ends
// take the value (Node.Views).
type Views struct {
	id      string
	dataDir string
	local   viewLocal
	members viewMembers
	peers   viewPeers
	// top counts the hits clients sent this node (record); its owner
	// goroutine ends with close.
	top          *topkeys.Recorder
	snapFailures *atomic.Uint64
}

// viewLocal is this node's own state as the views show it.
type viewLocal interface {
	Status() Status
	// leaseStats is what the node's holder holds (zero without one).
	leaseStats() LeaseStats
}

// viewMembers is the cluster's membership as the views need it: the
// servers of the latest configuration, with the HTTP addresses the
// replicated metadata records.
type viewMembers interface {
	Peers() ([]Peer, error)
	// serverIDs are the configuration's servers (none when it cannot be
	// read).
	serverIDs() []string
	// httpAddr is a member's HTTP address from the replicated metadata.
	httpAddr(id string) (string, bool)
}

// viewPeers asks another node's internal endpoint (the pooled,
// authenticated peer client).
type viewPeers interface {
	getJSON(ctx context.Context, url string, out any) error
}

func newViews(id, dataDir string, local viewLocal, members viewMembers, peers viewPeers, snapFailures *atomic.Uint64) *Views {
	return &Views{id: id, dataDir: dataDir, local: local, members: members, peers: peers,
		top: topkeys.New(topkeys.Config{}), snapFailures: snapFailures}
}

// close stops the top-keys recorder's goroutine.
func (v *Views) close() { v.top.Close() }

// nodeViews is the node as the views read it.
type nodeViews struct{ n *Node }

func (a nodeViews) Status() Status         { return a.n.Status() }
func (a nodeViews) Peers() ([]Peer, error) { return a.n.Peers() }

func (a nodeViews) leaseStats() LeaseStats {
	if a.n.holder == nil {
		return LeaseStats{}
	}
	return a.n.holder.stats()
}

func (a nodeViews) serverIDs() []string {
	var ids []string
	if cf := a.n.raft.GetConfiguration(); cf.Error() == nil {
		for _, s := range cf.Configuration().Servers {
			ids = append(ids, string(s.ID))
		}
	}
	return ids
}

func (a nodeViews) httpAddr(id string) (string, bool) {
	meta, ok := a.n.fsm.Node(id)
	return meta.HTTPAddr, ok && meta.HTTPAddr != ""
}
