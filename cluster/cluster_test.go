package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cluster/clustertest"
	"github.com/rlnode/rlnode/cluster/storage"
	"github.com/rlnode/rlnode/httpapi/apitest"
)

func TestFollowersForwardAndShareOneBudget(t *testing.T) {
	c := apitest.Start(t, 3, clustertest.Options{Limit: 6})
	leader := c.Leader(5 * time.Second)
	nodes := c.Live()
	for i := int64(0); i < 6; i++ {
		n := nodes[i%3]
		r := clustertest.MustAllow(t, n, "alice", 5-i)
		if r.ServedBy != leader.ID {
			t.Fatalf("hit via %s was decided by %q, want the leader %s", n.ID, r.ServedBy, leader.ID)
		}
	}
	for _, n := range nodes {
		clustertest.MustRefuse(t, n, "alice")
	}
	// A linearizable read through a follower sees every hit.
	f := c.Followers(leader)[0]
	p, err := f.Peek(context.Background(), "default", "alice", false)
	if err != nil || p.Used != 6 || p.Remaining != 0 || p.ServedBy != leader.ID {
		t.Fatalf("peek via follower: %+v %v; want used 6 served by the leader", p, err)
	}
	c.WaitConverged(5 * time.Second)
}

func TestLeaderFailoverKeepsCommittedWindows(t *testing.T) {
	c := apitest.Start(t, 3, clustertest.Options{Limit: 3})
	leader := c.Leader(5 * time.Second)
	clustertest.Spend(t, leader, "bob", 3)
	clustertest.MustAllow(t, leader, "carol", 2)
	old := leader
	old.Stop()
	start := time.Now()
	leader = c.Leader(10 * time.Second)
	t.Logf("new leader %s ready %s after the old one stopped", leader.ID, time.Since(start))
	for _, n := range c.Live() {
		clustertest.MustRefuse(t, n, "bob")
	}
	clustertest.MustAllow(t, c.Followers(leader)[0], "carol", 1)
	// The old leader comes back as a follower and catches up.
	old.Restart()
	c.WaitReady(10 * time.Second)
	c.WaitConverged(10 * time.Second)
	clustertest.MustRefuse(t, old, "bob")
	clustertest.MustAllow(t, old, "carol", 0)
}

func TestPartitionedLeaderNeverAllows(t *testing.T) {
	c := apitest.Start(t, 3, clustertest.Options{Limit: 100})
	old := c.Leader(5 * time.Second)
	c.Isolate(old)
	// The cut-off leader cannot commit: no hit it takes may be answered 200.
	for i := 0; i < 5; i++ {
		r := clustertest.Hit(t, old, "dave")
		if r.Status == http.StatusOK {
			t.Fatalf("isolated old leader allowed a hit: %s", r)
		}
		if r.Status != http.StatusServiceUnavailable || (r.Body.Code != "outcome_unknown" && r.Body.Code != "not_counted" && r.Body.Code != "no_leader") {
			t.Fatalf("isolated old leader answered %s, want 503 with a clear code", r)
		}
	}
	// The majority elects a new leader and keeps serving.
	var majority []*clustertest.Node
	for _, n := range c.Live() {
		if n != old {
			majority = append(majority, n)
		}
	}
	clustertest.Poll(t, 10*time.Second, func() error {
		for _, n := range majority {
			if n.IsLeader() {
				return nil
			}
		}
		return errors.New("no leader in the majority yet")
	})
	clustertest.Poll(t, 10*time.Second, func() error {
		if r := clustertest.Hit(t, majority[0], "erin"); r.Status != http.StatusOK {
			return fmt.Errorf("majority not serving yet: %s", r)
		}
		return nil
	})
	c.Heal()
	c.WaitReady(10 * time.Second)
	c.WaitConverged(10 * time.Second)
	// Whatever the unknown hits did, every node agrees on dave's window.
	used := int64(-1)
	for _, n := range c.Live() {
		p, err := n.Peek(context.Background(), "default", "dave", true)
		if err != nil {
			t.Fatal(err)
		}
		if used >= 0 && p.Used != used {
			t.Fatalf("replicas disagree on dave: %d vs %d", used, p.Used)
		}
		used = p.Used
	}
}

func TestNoLeaderMeansNotCounted(t *testing.T) {
	c := apitest.Start(t, 3, clustertest.Options{})
	leader := c.Leader(5 * time.Second)
	f := c.Followers(leader)
	f[0].Stop()
	f[1].Stop()
	// The leader steps down without a quorum; hits are never counted.
	clustertest.Poll(t, 10*time.Second, func() error {
		r := clustertest.Hit(t, leader, "frank")
		if r.Status == http.StatusOK {
			return fmt.Errorf("a node without quorum allowed a hit: %s", r)
		}
		if r.Body.Code != "not_counted" && r.Body.Code != "no_leader" {
			return fmt.Errorf("still %s, want not_counted/no_leader once leadership is gone", r)
		}
		return nil
	})
	if err := leader.Ready(0); err == nil {
		t.Fatal("a node without a leader reports ready")
	}
}

func TestRemoveAndRejoinWiped(t *testing.T) {
	c := apitest.Start(t, 3, clustertest.Options{Limit: 4, SnapshotThreshold: 50, TrailingLogs: 10, SnapshotInterval: 50 * time.Millisecond})
	leader := c.Leader(5 * time.Second)
	victim := c.Followers(leader)[0]
	if err := leader.Remove(context.Background(), victim.ID); err != nil {
		t.Fatal(err)
	}
	peers, _ := leader.Peers()
	if len(peers) != 2 {
		t.Fatalf("after remove: %d peers, want 2", len(peers))
	}
	victim.Stop()
	// Enough traffic to snapshot and truncate the log past the victim.
	for i := 0; i < 120; i++ {
		clustertest.MustAllow(t, leader, fmt.Sprintf("k%d", i), 3)
	}
	if _, err := leader.Snapshot(); err != nil {
		t.Fatal(err)
	}
	// A new, empty node takes the victim's place and must install a snapshot.
	fresh := c.AddNode(false)
	c.WaitReady(10 * time.Second)
	c.WaitConverged(10 * time.Second)
	// raft-wal drops truncated entries a whole 64 MiB segment at a time and
	// keeps serving them until then, so on wal the new node may legitimately
	// catch up from the log.
	if st := fresh.Status(); st.LastSnapshotIndex == 0 && st.RaftLog != string(storage.WAL) {
		t.Fatalf("new node caught up without a snapshot (status %+v); the log should have been truncated", st)
	}
	clustertest.MustAllow(t, fresh, "k7", 2)
	peers, _ = leader.Peers()
	if len(peers) != 3 {
		t.Fatalf("after rejoin: %d peers, want 3", len(peers))
	}
}

func TestJoinIsIdempotentAndReplaces(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{}) // no public API: joins travel on internal endpoints
	leader := c.Leader(5 * time.Second)
	f := c.Followers(leader)[0]
	ctx := context.Background()
	same := cluster.JoinRequest{ID: f.ID, RaftAddr: f.RaftAddr, HTTPAddr: f.HTTPAddr}
	// Through a follower: forwarded to the leader; same id and address is a no-op.
	if err := c.Followers(leader)[1].Join(ctx, same); err != nil {
		t.Fatalf("idempotent join via follower: %v", err)
	}
	peers, _ := leader.Peers()
	if len(peers) != 3 {
		t.Fatalf("idempotent join changed membership: %+v", peers)
	}
	// A server with the same id but a new address replaces the old entry.
	moved := cluster.JoinRequest{ID: f.ID, RaftAddr: "127.0.0.1:1", HTTPAddr: f.HTTPAddr, Voter: new(bool)}
	if err := leader.Join(ctx, moved); err != nil {
		t.Fatal(err)
	}
	peers, _ = leader.Peers()
	for _, p := range peers {
		if p.ID == f.ID && (p.RaftAddr != "127.0.0.1:1" || p.Voter) {
			t.Fatalf("member %s not replaced: %+v", f.ID, p)
		}
	}
	if len(peers) != 3 {
		t.Fatalf("replace changed the member count: %+v", peers)
	}
}

func TestTransferLeadership(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{})
	leader := c.Leader(5 * time.Second)
	target := c.Followers(leader)[1]
	res, err := c.Followers(leader)[0].TransferLeadership(context.Background(), target.ID)
	if err != nil || res.LeaderID != target.ID {
		t.Fatalf("transfer to %s: %+v %v", target.ID, res, err)
	}
	if _, err := leader.TransferLeadership(context.Background(), "nope"); err == nil {
		t.Fatal("transfer to an unknown server succeeded")
	}
}

// A leader whose clock is far behind must stretch a window, never reopen a
// spent one early; and time must keep moving under it.
func TestLaggingLeaderClockNeverReopensEarly(t *testing.T) {
	// Clock discipline would keep the laggard from leading; lift it to
	// test what the state machine does with a lagging leader's stamps.
	c := clustertest.New(t, apitest.Options(clustertest.Options{Limit: 2, Window: 1500 * time.Millisecond, MaxClockOffset: time.Hour}))
	c.AddNode(true)
	c.AddNode(false)
	third := c.AddNode(false)
	leader := c.WaitReady(10 * time.Second)
	if leader == third {
		res, err := leader.TransferLeadership(context.Background(), c.Nodes[0].ID)
		if err != nil {
			t.Fatalf("move leadership off the laggard: %v %+v", err, res)
		}
		leader = c.Leader(5 * time.Second)
	}
	third.SetClockOffset(-30 * time.Second)
	// The window resets at resetAt by the first leader's clock, which is
	// this machine's wall clock.
	resetAt := time.UnixMilli(clustertest.MustAllow(t, leader, "gina", 1).Body.ResetAt)
	clustertest.MustAllow(t, leader, "gina", 0)
	clustertest.MustRefuse(t, leader, "gina")
	if _, err := leader.TransferLeadership(context.Background(), third.ID); err != nil {
		t.Fatal(err)
	}
	c.Leader(5 * time.Second)
	// Under the lagging leader the spent window stays spent until a full
	// window has passed in real time...
	for time.Until(resetAt) > 250*time.Millisecond {
		r := clustertest.Hit(t, third, "gina")
		if r.Status == http.StatusOK {
			t.Fatalf("lagging leader reopened gina's window %s before it resets: %s", time.Until(resetAt), r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// ...and the window does roll over eventually (time keeps moving).
	clustertest.Poll(t, 5*time.Second, func() error {
		if r := clustertest.Hit(t, third, "gina"); r.Status != http.StatusOK {
			return fmt.Errorf("window never reopened under the lagging leader: %s", r)
		}
		return nil
	})
}

func TestSnapshotTruncatesLogAndRestartKeepsState(t *testing.T) {
	c := apitest.Start(t, 1, clustertest.Options{Limit: 3, SnapshotThreshold: 64, TrailingLogs: 16, SnapshotInterval: 50 * time.Millisecond})
	n := c.Leader(5 * time.Second)
	for i := 0; i < 300; i++ {
		clustertest.MustAllow(t, n, fmt.Sprintf("user-%d", i%100), 2-int64(i/100))
	}
	clustertest.Poll(t, 10*time.Second, func() error {
		if st := n.Status(); st.LastSnapshotIndex < 200 {
			return fmt.Errorf("no recent snapshot yet: %+v", st)
		}
		return nil
	})
	before := n.Status()
	n.Stop()
	stores, err := storage.OpenStores(n.Dir, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := stores.Log.FirstIndex()
	last, _ := stores.Log.LastIndex()
	stores.Close()
	if first <= 1 || last-first > 300 {
		t.Fatalf("log spans %d..%d after snapshots; want it truncated behind the snapshot", first, last)
	}
	n.Restart()
	c.WaitReady(10 * time.Second)
	clustertest.Poll(t, 5*time.Second, func() error {
		if st := n.Status(); st.DigestIndex < before.DigestIndex || st.Digest != before.Digest {
			return fmt.Errorf("after restart digest %s@%d, want %s@%d", st.Digest, st.DigestIndex, before.Digest, before.DigestIndex)
		}
		return nil
	})
	clustertest.MustRefuse(t, n, "user-5")
}

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A follower takes a definite refusal by the leader (here 401: its
// forwarded requests carry a token the leader does not accept) as not
// counted, never outcome_unknown; since the leader refused the node, not
// the caller, the caller gets 503 not_counted (try another node), never
// the 401 (issue 31).
func TestFollowerPassesOnTheLeadersDefiniteRefusal(t *testing.T) {
	var tampered atomic.Value // id of the node whose forwards carry a wrong token
	tampered.Store("")
	c := apitest.Start(t, 3, clustertest.Options{Limit: 5, Token: "s3cret",
		WrapPeer: func(from string, rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if tampered.Load() == from && r.URL.Path == cluster.ForwardPath {
					r = r.Clone(r.Context())
					r.Header.Set("Authorization", "Bearer wrong")
				}
				return rt.RoundTrip(r)
			})
		}})
	leader := c.Leader(5 * time.Second)
	f := c.Followers(leader)[0]
	tampered.Store(f.ID)
	r := clustertest.Hit(t, f, "alice")
	if r.Status != http.StatusServiceUnavailable || r.Body.Code != "not_counted" || !strings.Contains(r.Body.Detail, "the leader refused this node's request") {
		t.Fatalf("hit via %s whose forwards the leader refuses: %s; want 503 not_counted naming the leader's refusal", f.ID, r)
	}
	tampered.Store("")
	clustertest.MustAllow(t, f, "alice", 4) // the refused hit did not count
}
