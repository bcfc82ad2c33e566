package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/tlsconf"
)

// JoinRequest asks the cluster to add (or re-add) a server.
type JoinRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
	HTTPAddr string `json:"httpAddr"`
	// Voter defaults to true when omitted. A voter is added as a non-voter
	// first and promoted once it has caught up.
	Voter *bool `json:"voter,omitempty"`
	// Rejoin says the server lost its state and comes back empty: a voter
	// of the same id is its old incarnation and is removed first.
	Rejoin bool `json:"rejoin,omitempty"`
}

// Validate checks a join request.
func (j JoinRequest) Validate() error {
	var errs []error
	if err := fsm.ValidateNode(fsm.Node{ID: j.ID, RaftAddr: j.RaftAddr, HTTPAddr: j.HTTPAddr}); err != nil {
		errs = append(errs, err)
	}
	if j.RaftAddr == "" {
		errs = append(errs, errors.New("raftAddr is required"))
	}
	if j.HTTPAddr == "" {
		errs = append(errs, errors.New("httpAddr is required"))
	}
	return errors.Join(errs...)
}

func (j JoinRequest) voter() bool { return j.Voter == nil || *j.Voter }

// RemoveRequest asks the cluster to remove a server.
type RemoveRequest struct {
	ID string `json:"id"`
}

// TransferRequest asks the leader to hand leadership over (to ID if set).
type TransferRequest struct {
	ID string `json:"id,omitempty"`
}

// TransferResult names the new leader.
type TransferResult struct {
	LeaderID string `json:"leaderId"`
}

// JoinResult is the cluster's answer to a join.
type JoinResult struct {
	// Index is the leader's last log index once the server is in its
	// configuration: a server whose log has not reached it holds a
	// configuration older than its join, and infers no removal from it
	// (removal.go). 0 from a release before it was reported.
	Index uint64 `json:"index"`
}

// joinAnswer is JoinPath's body.
type joinAnswer struct {
	Joined string `json:"joined"`
	Index  uint64 `json:"index"`
}

// Join adds a server. A server with the same id and address is a no-op; one
// that shares only the id or only the address is removed first. On a
// follower the request goes to the leader.
func (n *Node) Join(ctx context.Context, j JoinRequest) error {
	_, err := n.JoinAt(ctx, j)
	return err
}

// JoinAt is Join, returning the configuration index the server is in.
func (n *Node) JoinAt(ctx context.Context, j JoinRequest) (JoinResult, error) {
	return opJoin.do(ctx, n, j)
}

func (n *Node) joinOnLeader(j JoinRequest) error {
	if err := n.checkJoinerFormat(j); err != nil {
		return err
	}
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return fmt.Errorf("join %s: read configuration: %w", j.ID, err)
	}
	present, isVoter := false, false
	for _, s := range cf.Configuration().Servers {
		sameID, sameAddr := s.ID == raft.ServerID(j.ID), s.Address == raft.ServerAddress(j.RaftAddr)
		switch {
		case sameID && sameAddr && !(j.Rejoin && s.Suffrage == raft.Voter):
			present, isVoter = true, s.Suffrage == raft.Voter
		case sameID || sameAddr:
			n.log.Info("replacing member that shares id or address", "old_id", s.ID, "old_addr", s.Address, "id", j.ID, "addr", j.RaftAddr, "rejoin", j.Rejoin)
			if err := n.raft.RemoveServer(s.ID, 0, 0).Error(); err != nil {
				return fmt.Errorf("join %s: remove old member %s: %w", j.ID, s.ID, translate(err))
			}
		}
	}
	// The HTTP address first: whoever removes the server as soon as it
	// shows in the configuration must find where to tell it so
	// (tellRemoved), or its join, retried, would undo the removal.
	meta := fsm.Node{ID: j.ID, RaftAddr: j.RaftAddr, HTTPAddr: j.HTTPAddr}
	if have, ok := n.fsm.Node(j.ID); !ok || have != meta {
		if err := n.apply(fsm.EncodeSetNode(meta), n.cfg.ApplyTimeout).Error(); err != nil {
			return fmt.Errorf("join %s: record metadata: %w", j.ID, translate(err))
		}
	}
	switch {
	case present && isVoter && !j.voter():
		if err := n.raft.DemoteVoter(raft.ServerID(j.ID), 0, 0).Error(); err != nil {
			return fmt.Errorf("join %s: demote to non-voter: %w", j.ID, translate(err))
		}
	case !present:
		// Every new server starts as a non-voter: it cannot cost the
		// cluster its quorum until it has proved it keeps up.
		if err := n.raft.AddNonvoter(raft.ServerID(j.ID), raft.ServerAddress(j.RaftAddr), 0, 0).Error(); err != nil {
			return fmt.Errorf("join %s: %w", j.ID, translate(err))
		}
		n.log.Info("server joined as a non-voter", "id", j.ID, "raft_addr", j.RaftAddr, "http_addr", j.HTTPAddr, "wants_vote", j.voter())
	}
	if j.voter() && !isVoter {
		n.promoter.stage(j.ID, n.raft.CommitIndex())
	}
	return nil
}

// Remove removes a server from the cluster (on the leader, or forwarded).
func (n *Node) Remove(ctx context.Context, id string) error {
	_, err := opRemove.do(ctx, n, RemoveRequest{ID: id})
	return err
}

func (n *Node) removeOnLeader(id string) error {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	found := false
	for _, s := range cf.Configuration().Servers {
		found = found || s.ID == raft.ServerID(id)
	}
	meta, ok := n.fsm.Node(id)
	if ok {
		if err := n.apply(fsm.EncodeRemoveNode(id), n.cfg.ApplyTimeout).Error(); err != nil {
			return fmt.Errorf("remove %s: forget metadata: %w", id, translate(err))
		}
	}
	if !found {
		return fmt.Errorf("remove %s: %w", id, ErrUnknownServer)
	}
	f := n.raft.RemoveServer(raft.ServerID(id), 0, 0)
	if err := f.Error(); err != nil {
		return fmt.Errorf("remove %s: %w", id, translate(err))
	}
	n.log.Info("server removed", "id", id)
	// Tell it at once: a removal wins over a join it may still be
	// retrying, and it stops taking traffic it can no longer decide.
	n.tellRemoved(id, meta.HTTPAddr, f.Index())
	return nil
}

// TransferLeadership hands leadership to id, or to the most up-to-date
// follower when id is empty, and waits until a new leader is known. On a
// follower the request goes to the leader.
func (n *Node) TransferLeadership(ctx context.Context, id string) (TransferResult, error) {
	return opTransfer.do(ctx, n, TransferRequest{ID: id})
}

func (n *Node) transferLeadership(ctx context.Context, r TransferRequest) (TransferResult, error) {
	var res TransferResult
	id := r.ID
	var f raft.Future
	if best, ok := n.clockCheck.bestPeer(); id == "" && ok {
		// Hand over to the peer whose clock agrees best, never to one
		// whose clock is off.
		id = string(best.ID)
	}
	if id == "" {
		f = n.raft.LeadershipTransfer()
	} else {
		cf := n.raft.GetConfiguration()
		if err := cf.Error(); err != nil {
			return res, err
		}
		var addr raft.ServerAddress
		voter := false
		for _, s := range cf.Configuration().Servers {
			if s.ID == raft.ServerID(id) {
				addr, voter = s.Address, s.Suffrage == raft.Voter
			}
		}
		if addr == "" {
			return res, fmt.Errorf("transfer leadership to %s: %w", id, ErrUnknownServer)
		}
		if !voter {
			return res, fmt.Errorf("transfer leadership to %s: it is not a voter (a joining server becomes one once it has caught up): %w", id, ErrConflict)
		}
		if id == n.cfg.ID {
			return TransferResult{LeaderID: id}, nil
		}
		// Read the target's clock now: the periodic reading may not have
		// reached it yet (a new leader, a new member), and a skewed
		// target would refuse to stand for election and only disturb
		// the cluster.
		if httpAddr, ok := n.peerHTTPAddr(id); ok {
			n.clockCheck.measurePeer(id, httpAddr)
		}
		if off, ms := n.clockCheck.peerSkewed(id); off {
			return res, fmt.Errorf("transfer leadership to %s: %s's clock is %s off from this leader's, more than --max-clock-offset allows a leader: %w", id, id, time.Duration(ms)*time.Millisecond, errors.Join(ErrConflict, ErrClockSkew))
		}
		f = n.raft.LeadershipTransferToServer(raft.ServerID(id), addr)
	}
	if err := f.Error(); err != nil {
		return res, fmt.Errorf("transfer leadership: %w", translate(err))
	}
	steppedDown := false
	for {
		lid, _ := n.Leader()
		if lid != "" && lid != n.cfg.ID {
			return TransferResult{LeaderID: lid}, nil
		}
		if !n.IsLeader() {
			steppedDown = true
		} else if steppedDown {
			// The target did not take over and this node won the
			// next election again: the transfer is over, not pending.
			return res, errors.New("transfer leadership: the target did not take over; this node leads again")
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("transfer leadership: waiting for the new leader: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Leave removes this node from the cluster, handing leadership over first if
// it leads. Used on graceful shutdown.
func (n *Node) Leave(ctx context.Context) error {
	if _, member := n.suffrage(); !member || n.removal.isRemoved() || n.raft.State() == raft.Shutdown {
		// Already removed (raft shuts itself down when its own removal
		// commits): nothing to leave. Asking the cluster anyway retried
		// until the shutdown timeout, against a leader it cannot know.
		return nil
	}
	n.removal.leave()
	if n.IsLeader() {
		peers, err := n.Peers()
		if err == nil && len(peers) == 1 {
			return errors.New("leave: this is the only member; nothing to leave")
		}
		if _, err := n.TransferLeadership(ctx, ""); err != nil {
			return fmt.Errorf("leave: %w", err)
		}
	}
	for {
		err := n.Remove(ctx, n.cfg.ID)
		if err == nil || n.removal.isRemoved() {
			// Removed, whether this call's answer got back or not.
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("leave: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// JoinCluster asks the members at addrs (HTTP base URLs) to add self, trying
// each in turn with backoff until one accepts or ctx ends.
func JoinCluster(ctx context.Context, addrs []string, self JoinRequest, token string, src *tlsconf.Source, log func(msg string, args ...any)) error {
	_, err := joinCluster(ctx, addrs, self, token, src, log)
	return err
}

func joinCluster(ctx context.Context, addrs []string, self JoinRequest, token string, src *tlsconf.Source, log func(msg string, args ...any)) (JoinResult, error) {
	pc := newPeerClient(token, src, nil)
	defer pc.close()
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		var errs []error
		for _, a := range addrs {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			req := self
			// The first hop may be a follower: it forwards to the leader.
			var ans joinAnswer
			err := pc.postJSON(actx, BaseURL(a)+JoinPath, req, &ans)
			cancel()
			if err == nil {
				return JoinResult{Index: ans.Index}, nil
			}
			var he *HTTPError
			if errors.As(err, &he) && (he.Status == 400 || he.Status == 401) {
				return JoinResult{}, fmt.Errorf("join via %s refused: %w", a, err)
			}
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
		}
		log("join attempt failed; retrying", "attempt", attempt, "error", errors.Join(errs...), "retry_in", backoff)
		select {
		case <-ctx.Done():
			return JoinResult{}, fmt.Errorf("join %v: %w (last: %v)", addrs, ctx.Err(), errors.Join(errs...))
		case <-time.After(backoff + time.Duration(rand.Int64N(int64(backoff/4)+1))):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// translate maps raft's errors to this package's.
func translate(err error) error {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return errors.Join(ErrNotLeader, err)
	}
	return err
}
