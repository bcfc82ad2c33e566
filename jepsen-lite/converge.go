package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// convergence is the end-of-run agreement check.
type convergence struct {
	OK        bool         `json:"ok"`
	Detail    string       `json:"detail"`
	Leader    string       `json:"leader,omitempty"`
	Index     uint64       `json:"index,omitempty"`
	Digest    string       `json:"digest,omitempty"`
	Voters    []string     `json:"voters,omitempty"`
	Divergent []string     `json:"divergent,omitempty"` // same index, different digests: never acceptable
	Seconds   float64      `json:"seconds"`
	Nodes     []nodeStatus `json:"nodes,omitempty"` // the last poll
}

// clusterPoll is one poll of every node.
type clusterPoll struct {
	status []nodeStatus
	errs   []error // status or readiness problem per node, nil if fine
	voters []string
	pErr   error
}

func pollCluster(ctx context.Context, cl *cluster, adm *admin) clusterPoll {
	n := len(cl.specs)
	p := clusterPoll{status: make([]nodeStatus, n), errs: make([]error, n)}
	var wg sync.WaitGroup
	for i, s := range cl.specs {
		wg.Go(func() {
			st, err := adm.status(ctx, s.url())
			if err != nil {
				p.errs[i] = err
				return
			}
			p.status[i] = st
			if err := adm.ready(ctx, s.url()); err != nil {
				p.errs[i] = fmt.Errorf("%s not ready: %w", s.id, err)
			}
		})
	}
	wg.Wait()
	// Membership as the leader sees it (any node would forward nothing
	// here: peers is local configuration, so ask the node others follow).
	base := cl.specs[0].url()
	for i, st := range p.status {
		if p.errs[i] == nil && st.State == "Leader" {
			base = cl.specs[i].url()
		}
	}
	peers, err := adm.peers(ctx, base)
	p.pErr = err
	for _, pe := range peers {
		if pe.Voter {
			p.voters = append(p.voters, pe.ID)
		}
	}
	slices.Sort(p.voters)
	return p
}

// problem says what keeps the poll from showing one settled cluster, or ""
// if every node is ready, follows the same leader and is a voter. With
// digests=true it also wants all nodes at one applied index with one
// digest.
func (p clusterPoll) problem(names []string, digests bool) string {
	for i, err := range p.errs {
		if err != nil {
			return fmt.Sprintf("%s: %v", names[i], err)
		}
		if p.status[i].Halted != "" {
			return fmt.Sprintf("%s: FSM halted: %s", names[i], p.status[i].Halted)
		}
	}
	leader := p.status[0].LeaderID
	for _, st := range p.status {
		if st.LeaderID == "" || st.LeaderID != leader {
			return fmt.Sprintf("leaders disagree: %s", p.leaders(names))
		}
	}
	if p.pErr != nil {
		return fmt.Sprintf("peers: %v", p.pErr)
	}
	want := slices.Sorted(slices.Values(names))
	if !slices.Equal(p.voters, want) {
		return fmt.Sprintf("voters are %v, want %v", p.voters, want)
	}
	if !digests {
		return ""
	}
	for _, st := range p.status[1:] {
		if st.digestAt() != p.status[0].digestAt() || st.Digest != p.status[0].Digest {
			return fmt.Sprintf("state differs: %s", p.digests(names))
		}
	}
	return ""
}

func (p clusterPoll) leaders(names []string) string {
	var b []string
	for i, st := range p.status {
		b = append(b, fmt.Sprintf("%s->%q", names[i], st.LeaderID))
	}
	return strings.Join(b, " ")
}

func (p clusterPoll) digests(names []string) string {
	var b []string
	for i, st := range p.status {
		b = append(b, fmt.Sprintf("%s@%d=%s", names[i], st.digestAt(), st.Digest))
	}
	return strings.Join(b, " ")
}

// waitSettled waits until every node is ready under one leader with full
// membership, so the final phase measures a healthy cluster.
func waitSettled(ctx context.Context, cl *cluster, adm *admin, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	names := cl.names()
	for {
		prob := pollCluster(ctx, cl, adm).problem(names, false)
		if prob == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not settled after %s: %s", timeout, prob)
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

// checkConvergence polls the quiet cluster until every node is ready,
// agrees on the leader and reports the same digest at the same applied
// index, or timeout passes. Any two nodes ever seen with different digests
// at the same index fail the check at once: that is divergence, not lag.
func checkConvergence(ctx context.Context, cl *cluster, adm *admin, timeout time.Duration) convergence {
	start := time.Now()
	names := cl.names()
	seen := map[uint64]map[string][]string{} // index -> digest -> nodes
	var last clusterPoll
	var prob string
	for {
		last = pollCluster(ctx, cl, adm)
		for i, st := range last.status {
			if st.Digest == "" {
				continue // no status from this node in this poll
			}
			idx := st.digestAt()
			if seen[idx] == nil {
				seen[idx] = map[string][]string{}
			}
			if !slices.Contains(seen[idx][st.Digest], names[i]) {
				seen[idx][st.Digest] = append(seen[idx][st.Digest], names[i])
			}
		}
		if div := divergences(seen); len(div) > 0 {
			return convergence{OK: false, Detail: "nodes diverged: same applied index, different state digest",
				Divergent: div, Seconds: time.Since(start).Seconds(), Nodes: last.status}
		}
		prob = last.problem(names, true)
		if prob == "" {
			st := last.status[0]
			return convergence{OK: true, Detail: fmt.Sprintf("all %d nodes ready, leader %s, digest %s at index %d",
				len(names), st.LeaderID, st.Digest, st.digestAt()),
				Leader: st.LeaderID, Index: st.digestAt(), Digest: st.Digest, Voters: last.voters,
				Seconds: time.Since(start).Seconds(), Nodes: last.status}
		}
		if time.Since(start) > timeout || ctx.Err() != nil {
			break
		}
		_ = sleepCtx(ctx, 250*time.Millisecond)
	}
	return convergence{OK: false, Detail: fmt.Sprintf("not converged after %s: %s", timeout, prob),
		Voters: last.voters, Seconds: time.Since(start).Seconds(), Nodes: last.status}
}

// divergences lists every index at which nodes reported different digests.
func divergences(seen map[uint64]map[string][]string) []string {
	var out []string
	idxs := slices.Sorted(maps.Keys(seen))
	for _, idx := range idxs {
		byDigest := seen[idx]
		if len(byDigest) < 2 {
			continue
		}
		var parts []string
		for _, d := range slices.Sorted(maps.Keys(byDigest)) {
			nodes := byDigest[d]
			sort.Strings(nodes)
			parts = append(parts, fmt.Sprintf("%s=%s", strings.Join(nodes, ","), d))
		}
		out = append(out, fmt.Sprintf("index %d: %s", idx, strings.Join(parts, " ")))
	}
	return out
}
