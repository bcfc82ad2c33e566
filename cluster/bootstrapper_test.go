package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// fakeBootNode is a node without Raft: its state and what it was asked to
// do are fields.
type fakeBootNode struct {
	me         BootstrapMember
	state      bool
	bootstrapd []raft.Server
	waiting    string
}

func (f *fakeBootNode) self() BootstrapMember   { return f.me }
func (f *fakeBootNode) hasRaftState() bool      { return f.state }
func (f *fakeBootNode) setWaiting(why string)   { f.waiting = why }
func (f *fakeBootNode) peerClient() *peerClient { return newPeerClient("", nil, nil) }
func (f *fakeBootNode) bootstrapCluster(s []raft.Server) error {
	f.bootstrapd, f.state = s, true
	return nil
}
func (f *fakeBootNode) JoinAndWait(context.Context, []string, JoinRequest, func(string, ...any)) error {
	return errors.New("not in this test")
}

func newTestBootstrapper(t *testing.T, m BootstrapMember, expect int) (*bootstrapper, *fakeBootNode) {
	node := &fakeBootNode{me: m}
	return newBootstrapper(m.ID, expect, t.TempDir(), node, hclog.NewNullLogger()), node
}

// A node accepts one claim, ever: the same claim again (a claimer's
// retry), never another; what it accepted survives a restart (a new
// bootstrapper over the same data dir) and says whether it is a voter.
func TestBootstrapperAcceptsOneClaim(t *testing.T) {
	b, node := newTestBootstrapper(t, member("n2"), 3)
	claim := BootstrapClaim{By: "n1", Members: []BootstrapMember{member("n1"), member("n2"), member("n3")}}
	if b.claimedVoter() {
		t.Fatal("a voter before accepting anything")
	}
	if err := b.accept(claim); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if err := b.accept(claim); err != nil {
		t.Fatalf("the same claim again: %v", err)
	}
	other := BootstrapClaim{By: "n0", Members: []BootstrapMember{member("n0"), member("n2"), member("n3")}}
	if err := b.accept(other); !errors.Is(err, ErrClaimRefused) || !strings.Contains(err.Error(), "already accepted the claim of n1") {
		t.Fatalf("another claim: %v, want a refusal naming n1", err)
	}
	again := newBootstrapper("n2", 3, b.dataDir, node, hclog.NewNullLogger())
	if info := again.info(); info.Claim == nil || info.Claim.By != "n1" || info.Expect != 3 || info.HasState || info.ID != "n2" {
		t.Fatalf("after a restart: %+v, want n1's claim kept", info)
	}
	if !again.claimedVoter() {
		t.Fatal("a node named in the claim it accepted is a voter")
	}
	node.me.RaftAddr = "elsewhere:7000"
	if again.claimedVoter() {
		t.Fatal("a node at another Raft address than the claim names is not its voter")
	}
	withState, n := newTestBootstrapper(t, member("n3"), 3)
	n.state = true
	if err := withState.accept(claim); !errors.Is(err, ErrClaimRefused) {
		t.Fatalf("a node with Raft state accepted: %v", err)
	}
}

// serveClaims serves b's bootstrap endpoints as a node does, on real TCP.
func serveClaims(t *testing.T, b *bootstrapper) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+BootstrapInfoPath, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, b.info()) })
	mux.HandleFunc("POST "+BootstrapClaimPath, func(w http.ResponseWriter, r *http.Request) {
		var c BootstrapClaim
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			writeProblem(w, http.StatusBadRequest, "invalid_request", err.Error())
			return
		}
		if err := b.accept(c); err != nil {
			writeProblem(w, http.StatusConflict, "invalid_request", err.Error())
			return
		}
		writeJSON(w, map[string]string{"accepted": c.By})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// The lowest id claims, every member accepts over HTTP, and only then
// does the claimer bootstrap, with all of them as voters; a member that
// accepted another claim stops it.
func TestBootstrapperClaimsAndBootstrapsOnceAllAccept(t *testing.T) {
	n2, _ := newTestBootstrapper(t, BootstrapMember{ID: "n2", RaftAddr: "n2:7000"}, 2)
	n2addr := serveClaims(t, n2)
	n2.node.(*fakeBootNode).me.HTTPAddr = n2addr
	n1, node1 := newTestBootstrapper(t, BootstrapMember{ID: "n1", RaftAddr: "n1:7000", HTTPAddr: "unused"}, 2)
	pc := node1.peerClient()
	defer pc.close()

	infos, unreached := n1.probe(context.Background(), pc, []string{n2addr, "127.0.0.1:1"})
	if len(infos) != 1 || infos[0].ID != "n2" || len(unreached) != 1 {
		t.Fatalf("probe: %+v, unreached %v", infos, unreached)
	}
	done, note := n1.tryClaim(context.Background(), pc, infos)
	if !done || note != "" || len(node1.bootstrapd) != 2 || node1.bootstrapd[1].ID != "n2" || node1.bootstrapd[1].Suffrage != raft.Voter {
		t.Fatalf("claim: done %v %q, bootstrapped %+v", done, note, node1.bootstrapd)
	}
	if c, _ := n2.readClaim(); c == nil || c.By != "n1" {
		t.Fatalf("n2 recorded %+v, want n1's claim", c)
	}

	// n0 finds n2 taken by n1's claim: it must not bootstrap.
	n0, node0 := newTestBootstrapper(t, BootstrapMember{ID: "n0", RaftAddr: "n0:7000"}, 2)
	n2.node.(*fakeBootNode).state = false
	infos = []BootstrapInfo{{BootstrapMember: n2.node.self(), Expect: 2}}
	if done, note := n0.tryClaim(context.Background(), pc, infos); done || !strings.Contains(note, "n2 has not accepted") || node0.bootstrapd != nil {
		t.Fatalf("a claim over a taken member: done %v %q, bootstrapped %+v", done, note, node0.bootstrapd)
	}
}
