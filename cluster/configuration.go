package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rlnode/rlnode/tlsconf"
)

// ConfigurationPath serves this node's latest Raft configuration to any
// node (a node certificate under mutual TLS, the token otherwise): a node
// catching up asks the members it trusts whether a name it cannot place
// is in theirs (peerauth.go), and a node restarting with --join asks the
// leader whether it is still a member (StillMember). It takes no input;
// with ?verify it confirms leadership with a quorum first.
const ConfigurationPath = "/internal/v1/configuration"

// ConfigurationAnswer is ConfigurationPath's answer.
type ConfigurationAnswer struct {
	// ID is the node that answered.
	ID string `json:"id"`
	// LastIndex is the answerer's last log index: its configuration is
	// at least as new as its log up to there.
	LastIndex uint64         `json:"lastIndex"`
	Servers   []ConfigServer `json:"servers"`
	// Leader is the leader this node knows; Verified says the answerer
	// is that leader and confirmed it with a quorum just now (asked with
	// ?verify).
	Leader         string `json:"leader,omitempty"`
	LeaderHTTPAddr string `json:"leaderHttpAddr,omitempty"`
	Verified       bool   `json:"verified,omitempty"`
}

// ConfigServer is one server of a configuration.
type ConfigServer struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
	Voter    bool   `json:"voter"`
}

// names reports whether the configuration names id.
func (c ConfigurationAnswer) names(id string) bool {
	_, ok := c.server(id)
	return ok
}

func (c ConfigurationAnswer) server(id string) (ConfigServer, bool) {
	for _, s := range c.Servers {
		if s.ID == id {
			return s, true
		}
	}
	return ConfigServer{}, false
}

// maxConfigurationAnswer bounds what a node reads of an answer: a
// configuration of a few hundred servers.
const maxConfigurationAnswer = 64 << 10

// askConfiguration asks the node at httpAddr for its configuration. Under
// mutual TLS the answer counts only if the certificate it came with is a
// node certificate naming the node that says it answered, and, when want
// is set, naming want.
func askConfiguration(ctx context.Context, pc *peerClient, src *tlsconf.Source, httpAddr, want string, verify bool) (ConfigurationAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	url := BaseURL(httpAddr) + ConfigurationPath
	if verify {
		url += "?verify"
	}
	resp, err := pc.send(ctx, http.MethodGet, url, "", http.NoBody, 0)
	if err != nil {
		return ConfigurationAnswer{}, err
	}
	defer resp.Body.Close()
	var ans ConfigurationAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxConfigurationAnswer)).Decode(&ans); err != nil {
		return ConfigurationAnswer{}, fmt.Errorf("configuration from %s: %w", httpAddr, err)
	}
	if want != "" && ans.ID != want {
		return ConfigurationAnswer{}, fmt.Errorf("configuration from %s: answered by %q, not %q", httpAddr, ans.ID, want)
	}
	if src != nil && src.Mutual() {
		name, _, err := src.PeerNode(resp.TLS)
		if err != nil {
			return ConfigurationAnswer{}, fmt.Errorf("configuration from %s: %w", httpAddr, err)
		}
		if name != ans.ID {
			return ConfigurationAnswer{}, fmt.Errorf("configuration from %s: the answer says %q, the certificate %q", httpAddr, ans.ID, name)
		}
	}
	return ans, nil
}

// LeaderView is the cluster's configuration as its leader confirmed it.
type LeaderView struct {
	Leader string
	// Member: the configuration names the asking node's id; RaftAddr is
	// the Raft address it names it with.
	Member   bool
	RaftAddr string
}

// AskLeader asks the nodes at addrs (HTTP base URLs, as --join) for the
// configuration, as confirmed by the leader with a quorum: it asks each
// once, and a follower's answer naming the leader's address leads to the
// leader. It gives up after one round (a cluster with no leader now is no
// answer): a restarting node must not wait on it.
func AskLeader(ctx context.Context, addrs []string, id, token string, src *tlsconf.Source) (LeaderView, error) {
	pc := newPeerClient(token, src, nil)
	defer pc.close()
	addrs = append([]string(nil), addrs...)
	tried := map[string]bool{}
	var errs []error
	for i := 0; i < len(addrs); i++ {
		a := addrs[i]
		if tried[a] {
			continue
		}
		tried[a] = true
		ans, err := askConfiguration(ctx, pc, src, a, "", true)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			continue
		}
		if !ans.Verified {
			if ans.LeaderHTTPAddr != "" && len(addrs) < 16 {
				addrs = append(addrs, ans.LeaderHTTPAddr)
			}
			errs = append(errs, fmt.Errorf("%s: not the leader (the leader it knows: %q)", a, ans.Leader))
			continue
		}
		s, ok := ans.server(id)
		return LeaderView{Leader: ans.ID, Member: ok, RaftAddr: s.RaftAddr}, nil
	}
	return LeaderView{}, fmt.Errorf("no leader confirmed the configuration: %w", errors.Join(errs...))
}
