package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster/storage"
	"github.com/rlnode/rlnode/window"
)

// fakeMembers is a configuration of servers and their HTTP addresses.
type fakeMembers struct {
	ids   []string
	addrs map[string]string
}

func (m fakeMembers) serverIDs() []string { return m.ids }
func (m fakeMembers) httpAddr(id string) (string, bool) {
	a, ok := m.addrs[id]
	return a, ok && a != ""
}
func (m fakeMembers) Peers() ([]Peer, error) {
	var out []Peer
	for _, id := range m.ids {
		out = append(out, Peer{ID: id, HTTPAddr: m.addrs[id]})
	}
	return out, nil
}

// fakeLocal is a node's own status.
type fakeLocal struct{ st Status }

func (l fakeLocal) Status() Status         { return l.st }
func (l fakeLocal) leaseStats() LeaseStats { return LeaseStats{} }

// serveViews serves v's internal endpoints as a node does, on real TCP.
func serveViews(t *testing.T, v *Views) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+TopPath, v.serveTop)
	mux.HandleFunc("GET "+MemberStatusPath, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, v.LocalMemberStatus()) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func newTestViews(t *testing.T, id string, st Status, members viewMembers) *Views {
	dir := t.TempDir()
	v := newViews(id, dir, fakeLocal{st}, members, newPeerClient("", nil, nil), new(atomic.Uint64))
	t.Cleanup(v.close)
	return v
}

// waitTop waits until v's recorder has drained what it was handed.
func waitTop(t *testing.T, v *Views, policy string, total uint64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		rep := v.LocalTop(policy, false)
		var got uint64
		for _, p := range rep.Policies {
			got += p.Allowed.Total + p.Refused.Total + p.WouldRefuse.Total
		}
		if got >= total {
			return
		}
	}
	t.Fatalf("%s's top keys never counted %d hits", v.id, total)
}

// The cluster views collect every member over the internal path and name
// the members they could not ask, without a cluster: two views on real
// HTTP, and a third member whose address is unknown.
func TestViewsMergeMembersAndNameTheUnreachable(t *testing.T) {
	members := fakeMembers{ids: []string{"n1", "n2", "n3"}, addrs: map[string]string{}}
	n1 := newTestViews(t, "n1", Status{ID: "n1", State: "Leader", CommitIndex: 10, AppliedIndex: 10}, members)
	n2 := newTestViews(t, "n2", Status{ID: "n2", State: "Follower", CommitIndex: 10, AppliedIndex: 7}, members)
	members.addrs["n2"] = serveViews(t, n2)

	hit := func(client string, allowed bool) CheckResult {
		o := window.Allowed
		if !allowed {
			o = window.Refused
		}
		return CheckResult{Allowed: allowed, Hits: []HitResult{{Policy: "p", Client: client, Outcome: o}}}
	}
	for range 3 {
		n1.record(hit("alice", true))
	}
	n2.record(hit("alice", true))
	n2.record(hit("bob", false))
	n2.record(CheckResult{Hits: []HitResult{{Policy: "gone", Client: "x", UnknownPolicy: true}}})
	waitTop(t, n1, "p", 3)
	waitTop(t, n2, "p", 2)

	ct := n1.ClusterTop(context.Background(), "p", 10, false)
	if len(ct.Nodes) != 3 || !ct.Nodes[0].OK || !ct.Nodes[1].OK || ct.Nodes[2].OK || ct.Nodes[2].Error != "address unknown" {
		t.Fatalf("nodes %+v: want n1 and n2 asked, n3 named with its address unknown", ct.Nodes)
	}
	if len(ct.Policies) != 1 || ct.Policies[0].Allowed.Total != 4 || ct.Policies[0].Refused.Total != 1 ||
		len(ct.Policies[0].Allowed.Keys) != 1 || ct.Policies[0].Allowed.Keys[0].Key != "alice" || ct.Policies[0].Allowed.Keys[0].Count != 4 {
		t.Fatalf("merged top %+v: want alice allowed 4 times across both nodes, bob refused once", ct.Policies)
	}
	if ct.History != nil {
		t.Fatalf("history %+v not asked for", ct.History)
	}
	// The charts' history, asked for: both nodes' steps added up.
	h := n1.ClusterTop(context.Background(), "p", 10, true).History
	var allowed, refused uint64
	for _, p := range h {
		for _, pt := range p.Points {
			allowed, refused = allowed+pt.Allowed, refused+pt.Refused
		}
	}
	if len(h) != 1 || h[0].Policy != "p" || allowed != 4 || refused != 1 {
		t.Fatalf("merged history %+v: want p with 4 allowed and 1 refused across both nodes", h)
	}

	ms, err := n1.Members(context.Background())
	if err != nil || len(ms) != 3 {
		t.Fatalf("members %+v, %v", ms, err)
	}
	if !ms[0].Reachable || !ms[1].Reachable || ms[1].Lag != 3 || ms[2].Reachable || ms[2].Error != "address unknown" {
		t.Fatalf("members %+v: want n1 and n2 reachable (n2 3 entries behind), n3 unknown", ms)
	}
}

// Disk reads the data dir it was given; snapshot failures are the node's
// counter, read at scrape time.
func TestViewsDiskUse(t *testing.T) {
	failures := new(atomic.Uint64)
	dir := t.TempDir()
	v := newViews("n1", dir, fakeLocal{}, fakeMembers{}, newPeerClient("", nil, nil), failures)
	defer v.close()
	if err := os.MkdirAll(filepath.Join(dir, storage.SnapshotDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, storage.SnapshotDir, "s"), make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	failures.Add(2)
	if d := v.Disk(); d.SnapshotBytes != 1000 || d.FSSize == 0 || v.SnapshotFailures() != 2 {
		t.Fatalf("disk %+v, failures %d: want 1000 snapshot bytes, a file system size, 2 failures", d, v.SnapshotFailures())
	}
}
