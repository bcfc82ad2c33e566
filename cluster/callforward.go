package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/fsm"
)

// CallsPath is the leader's endpoint for a follower's batched hop of
// per-call requests (callwire.go).
const CallsPath = "/internal/v1/calls"

// callHop is a follower's way to the leader for per-call requests: the
// requests its callers send while a hop is in flight go together in the
// next one (flat combining, as the leader's committer), over the binary
// wire, where each used to be a JSON request of its own. A request the
// hop did not certainly answer (no leader, the leader moved, a leader of
// an earlier release without the path) goes the old way, by the one retry
// rule (opCalls), from its own caller.
type callHop struct {
	n    *Node
	comb combiner
	// oldLeader is a leader id that answered 404, not asked again until
	// oldUntil (it may be upgraded in place meanwhile).
	mu        sync.Mutex
	oldLeader string
	oldUntil  time.Time
	// hops and sent count the hops and the requests they carried.
	hops, sent atomic.Uint64
}

// CallHopStats says how this node's per-call requests reached the leader
// in batched hops: hops sent, and the requests they carried.
type CallHopStats struct {
	Hops     uint64 `json:"hops"`
	Requests uint64 `json:"requests"`
}

// CallHopStats is this node's (a follower's) batched hops so far.
func (n *Node) CallHopStats() CallHopStats {
	return CallHopStats{Hops: n.callHop.hops.Load(), Requests: n.callHop.sent.Load()}
}

// oldLeaderRecheck is how long a leader that answered 404 is not asked.
const oldLeaderRecheck = 30 * time.Second

func (r nodeRoute) calls(ctx context.Context, req CallsRequest) (CallsAnswer, error) {
	n := r.n
	if !n.IsLeader() && n.callHop.usable() {
		ans, err := n.callHop.comb.submit(req, n.callHop.flush)
		if err == nil || isFinal(err) || errors.Is(err, ErrOutcomeUnknown) {
			return ans, err
		}
		// Certainly not counted: the one rule below finds the leader.
	}
	return opCalls.retrying(ctx, n, req, n.cfg.ApplyTimeout)
}

func (h *callHop) usable() bool {
	id, _ := h.n.Leader()
	h.mu.Lock()
	defer h.mu.Unlock()
	return id != "" && (id != h.oldLeader || time.Now().After(h.oldUntil))
}

// flush sends the queued requests, at most maxCallsPerHop requests and
// maxCallItemsPerHop items per hop, and answers every waiter.
func (h *callHop) flush(batch []*callWaiter) {
	for len(batch) > 0 {
		take, items := 0, 0
		for take < len(batch) && take < maxCallsPerHop && items+len(batch[take].req.Items) <= maxCallItemsPerHop {
			items += len(batch[take].req.Items)
			take++
		}
		part := batch[:take]
		batch = batch[take:]
		reqs := make([]CallsRequest, len(part))
		for i, w := range part {
			reqs[i] = w.req
		}
		res := h.send(reqs)
		for i, w := range part {
			w.done <- callDone{ans: res[i].ans, err: res[i].err}
		}
	}
}

// send is one hop to the leader.
func (h *callHop) send(reqs []CallsRequest) []callsResult {
	fail := func(err error) []callsResult {
		out := make([]callsResult, len(reqs))
		for i := range out {
			out[i].err = err
		}
		return out
	}
	n := h.n
	id, addr := n.Leader()
	if id == "" || addr == "" {
		return fail(notCounted(ErrNoLeader, nil))
	}
	ctx, cancel := timeoutOrStop(n.stop, n.cfg.ApplyTimeout)
	defer cancel()
	h.hops.Add(1)
	h.sent.Add(uint64(len(reqs)))
	resp, err := n.fwd.peers.do(ctx, http.MethodPost, BaseURL(addr)+CallsPath, "application/octet-stream", encodeCallsHop(reqs))
	if err != nil {
		if isDialError(err) {
			return fail(notCounted(nil, err))
		}
		return fail(outcomeUnknown(fmt.Errorf("calls hop to leader %s: %w", id, err)))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxCallsHopBytes))
	switch {
	case err != nil:
		return fail(outcomeUnknown(fmt.Errorf("read calls hop answer of %s: %w", id, err)))
	case resp.StatusCode == http.StatusNotFound:
		// A leader of an earlier release: nothing was decided.
		h.mu.Lock()
		h.oldLeader, h.oldUntil = id, time.Now().Add(oldLeaderRecheck)
		h.mu.Unlock()
		return fail(notCounted(nil, decodeHTTPError(resp, b)))
	case resp.StatusCode != http.StatusOK:
		return fail(opError(decodeHTTPError(resp, b)))
	}
	out, err := decodeCallsHopAnswer(b, reqs)
	if err != nil {
		return fail(outcomeUnknown(err))
	}
	return out
}

// serveCallsHop is the leader's CallsPath: each request decided through
// the committer (they coalesce there with every other node's), one answer
// each. A node that does not lead answers every request not counted.
func (n *Node) serveCallsHop(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCallsHopBytes))
	if err != nil {
		writeProblem(w, http.StatusRequestEntityTooLarge, "invalid_request", "calls hop body: "+err.Error())
		return
	}
	reqs, err := decodeCallsHop(body)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	res := make([]callsResult, len(reqs))
	switch {
	case !n.IsLeader():
		for i := range res {
			res[i].err = notCounted(ErrNotLeader, nil)
		}
	default:
		if err := n.gate.RequireFormat(fsm.FormatR5); err != nil {
			for i := range res {
				res[i].err = err
			}
			break
		}
		var wg sync.WaitGroup
		for i, req := range reqs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := req.check(); err != nil {
					res[i].err = notCounted(ErrBadRequest, err)
					return
				}
				res[i].ans, res[i].err = n.calls.commit.submit(req)
			}()
		}
		wg.Wait()
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(HeaderServedBy, n.cfg.ID)
	w.WriteHeader(http.StatusOK)
	w.Write(encodeCallsHopAnswer(n.cfg.ID, res))
}
