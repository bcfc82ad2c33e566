package cluster

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/rlnode/rlnode/topkeys"
	"github.com/rlnode/rlnode/window"
)

// TopPath serves this node's own top keys to the node a user asked.
const TopPath = "/internal/v1/top"

// record hands a decided check's hits to the top-keys recorder. Only
// the node a client asked records (forwarded hits reach the leader's
// batcher, not CheckAll), so the nodes' counts are disjoint and add up.
// A refused check (all or nothing: none of its hits counted) is a refusal
// of the keys that refused it, not of every key it named: an Envoy request
// of five descriptors refused by one is one refusal, of that one client,
// and the four with room are neither refused nor allowed.
func (v *Views) record(res CheckResult) {
	refusers := 0
	if !res.Allowed {
		for _, h := range res.Hits {
			if !h.UnknownPolicy && h.Outcome != window.Allowed {
				refusers++
			}
		}
	}
	for i, h := range res.Hits {
		if h.UnknownPolicy {
			continue
		}
		o := topkeys.Allowed
		switch {
		case !res.Allowed && h.Outcome == window.Allowed && (refusers > 0 || i > 0):
			continue // had room; the check was refused by another key
		case !res.Allowed || h.Outcome != window.Allowed:
			o = topkeys.Refused // refused it (or, no key refused by itself, the first stands for the check)
		case h.WouldRefuse():
			o = topkeys.WouldRefuse
		}
		v.top.Record(h.Policy, h.Client, o)
	}
}

// LocalTop is this node's own view: the hits clients sent to it; with
// history, also their history per step over the last minutes.
func (v *Views) LocalTop(policyName string, history bool) topkeys.Report {
	rep := v.top.Top(policyName, 0)
	if history {
		rep.History = v.top.History(policyName)
	}
	return rep
}

// TopNode says whether a member's counts are in a cluster top list.
type TopNode struct {
	ID    string `json:"id"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// ClusterTop is the top keys of the whole cluster: every reachable
// member's summaries merged.
type ClusterTop struct {
	topkeys.Report
	Nodes []TopNode `json:"nodes"`
}

// ClusterTop collects every member's top keys of policyName ("" for all)
// over the internal path and merges them, keeping n keys per list; with
// history, their histories too (the status page's charts). A member that
// does not answer within a second is named, not waited for.
func (v *Views) ClusterTop(ctx context.Context, policyName string, keep int, history bool) ClusterTop {
	servers := v.members.serverIDs()
	if len(servers) == 0 {
		servers = []string{v.id}
	}
	reports := make([]topkeys.Report, len(servers))
	nodes := make([]TopNode, len(servers))
	var wg sync.WaitGroup
	for i, id := range servers {
		nodes[i].ID = id
		if id == v.id {
			reports[i], nodes[i].OK = v.LocalTop(policyName, history), true
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i], nodes[i] = v.peerTop(ctx, id, policyName, history)
		}()
	}
	wg.Wait()
	var got []topkeys.Report
	for i := range nodes {
		if nodes[i].OK {
			got = append(got, reports[i])
		}
	}
	return ClusterTop{Report: topkeys.MergeReports(keep, got...), Nodes: nodes}
}

func (v *Views) peerTop(ctx context.Context, id, policyName string, history bool) (topkeys.Report, TopNode) {
	tn := TopNode{ID: id}
	addr, ok := v.members.httpAddr(id)
	if !ok {
		tn.Error = "address unknown"
		return topkeys.Report{}, tn
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var rep topkeys.Report
	q := "?policy=" + url.QueryEscape(policyName)
	if history {
		q += "&history=1"
	}
	if err := v.peers.getJSON(ctx, BaseURL(addr)+TopPath+q, &rep); err != nil {
		tn.Error = err.Error()
		return rep, tn
	}
	tn.OK = true
	return rep, tn
}

// serveTop is TopPath: this node's summaries, every key they hold.
func (v *Views) serveTop(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, v.LocalTop(r.URL.Query().Get("policy"), r.URL.Query().Get("history") == "1"))
}
