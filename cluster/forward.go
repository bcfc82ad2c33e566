package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/rlnode/rlnode/policy"
)

// Forwarding is how a node that does not lead reaches the one that does. It
// is one unit: the peer client (peer.go), the wire codec of forwarded hits
// (wire.go), the retry rules below, and the internal endpoint on which the
// leader serves forwarded hits (InternalHandler, mounted by the binary next
// to the public API). Followers never decide; they forward and pass the
// leader's answer on.

// localNode is what forwarding needs from its own node.
type localNode interface {
	IsLeader() bool
	Leader() (id, httpAddr string)
	// submitLocal hands groups to this node's leader batcher.
	submitLocal(ctx context.Context, reqs ...group) []outcome
}

type forwarder struct {
	cfg   Config
	node  localNode
	peers *peerClient
	stop  <-chan struct{}
}

func newForwarder(cfg Config, node localNode, stop <-chan struct{}) *forwarder {
	return &forwarder{cfg: cfg, node: node, peers: newPeerClient(cfg.ClusterToken, cfg.TLS, cfg.PeerTransport), stop: stop}
}

func (f *forwarder) close() { f.peers.close() }

// batch is the follower's flush: one request to the leader carries
// the whole batch.
func (f *forwarder) batch(reqs []group) func() []outcome {
	return func() []outcome {
		return f.until(reqs, time.Now().Add(f.cfg.ApplyTimeout))
	}
}

// until sends reqs to whoever leads. Attempts that certainly did not
// count (the leader refused with not-leader, the connection could not be
// opened) are retried until deadline, following leadership as it moves.
// With no leader known at all it gives up after NoLeaderWait, so a node cut
// off from the majority fails fast instead of holding callers.
func (f *forwarder) until(reqs []group, deadline time.Time) []outcome {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	backoff := 10 * time.Millisecond
	last := notCounted(ErrNoLeader, nil)
	var leaderless time.Time
	for {
		select {
		case <-f.stop:
			return failAll(len(reqs), notCounted(nil, ErrClosed))
		default:
		}
		id, addr := f.node.Leader()
		switch {
		case f.node.IsLeader():
			leaderless = time.Time{}
			outs := f.node.submitLocal(ctx, reqs...)
			if !anyNotLeader(outs) {
				return outs
			}
			last = notCounted(ErrNotLeader, nil)
		case id != "" && addr != "":
			leaderless = time.Time{}
			outs, err := f.once(ctx, addr, reqs)
			switch {
			case err == nil && !anyNotCounted(outs):
				return outs
			case err == nil:
				// The leader moved on: keep the answers we have and retry
				// only the hits that certainly did not count.
				return f.retryNotCounted(reqs, outs, deadline)
			case isDefinite(err):
				// The leader answered and refused the request itself (bad
				// request, wrong token): nothing was counted.
				return failAll(len(reqs), notCounted(nil, err))
			case !isDialError(err):
				return failAll(len(reqs), outcomeUnknown(fmt.Errorf("forward to leader %s: %w", id, err)))
			}
			last = notCounted(nil, fmt.Errorf("leader %s at %s unreachable: %w", id, addr, err))
		default:
			if leaderless.IsZero() {
				leaderless = time.Now()
			} else if time.Since(leaderless) > f.cfg.NoLeaderWait {
				return failAll(len(reqs), notCounted(ErrNoLeader, nil))
			}
		}
		if time.Now().Add(backoff).After(deadline) {
			return failAll(len(reqs), last)
		}
		select {
		case <-time.After(backoff):
		case <-f.stop:
		}
		backoff = min(backoff*2, 100*time.Millisecond)
	}
}

func (f *forwarder) retryNotCounted(reqs []group, outs []outcome, deadline time.Time) []outcome {
	var again []group
	var at []int
	for i, o := range outs {
		if o.err != nil && errors.Is(o.err, ErrNotCounted) {
			again = append(again, reqs[i])
			at = append(at, i)
		}
	}
	if time.Until(deadline) < 20*time.Millisecond {
		return outs
	}
	time.Sleep(20 * time.Millisecond)
	retried := f.until(again, deadline)
	for j, i := range at {
		outs[i] = retried[j]
	}
	return outs
}

func anyNotLeader(outs []outcome) bool {
	for _, o := range outs {
		if o.err != nil && errors.Is(o.err, ErrNotLeader) {
			return true
		}
	}
	return false
}

func anyNotCounted(outs []outcome) bool {
	for _, o := range outs {
		if o.err != nil && errors.Is(o.err, ErrNotCounted) {
			return true
		}
	}
	return false
}

func (f *forwarder) once(ctx context.Context, addr string, reqs []group) ([]outcome, error) {
	f.cfg.Observer.Forwarded(hitCount(reqs))
	body := encodeForwardRequest(make([]byte, 0, 8+hitCount(reqs)*32), reqs)
	resp, err := f.peers.do(ctx, http.MethodPost, BaseURL(addr)+ForwardPath, "application/octet-stream", body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read forward response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, decodeHTTPError(resp.StatusCode, b)
	}
	return decodeForwardResponse(b, reqs)
}

// serve decides a forwarded batch on the leader and returns the encoded
// response. A node that is not the leader answers every hit with
// not-counted, so the sender retries against the real leader rather than
// this node forwarding again.
func (f *forwarder) serve(ctx context.Context, body []byte) ([]byte, error) {
	reqs, err := decodeForwardRequest(body)
	if err != nil {
		return nil, err
	}
	var outs []outcome
	if f.node.IsLeader() {
		outs = f.node.submitLocal(ctx, reqs...)
	} else {
		outs = failAll(len(reqs), notCounted(ErrNotLeader, nil))
	}
	return encodeForwardResponse(make([]byte, 0, 16+hitCount(reqs)*64), f.cfg.ID, outs), nil
}

// isDefinite reports whether a peer's HTTP answer is a definite refusal of
// the request (4xx): it was not counted, and retrying will not help.
func isDefinite(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.Status >= 400 && he.Status < 500
}

// peek sends a linearizable read to the leader.
func (f *forwarder) peek(ctx context.Context, policyName, client string) (PeekResult, error) {
	base, err := f.leaderURL()
	if err != nil {
		return PeekResult{}, err
	}
	resp, err := f.peers.do(ctx, http.MethodGet, base+PeekPath+url.PathEscape(policyName)+"/"+url.PathEscape(client), "", nil)
	if err != nil {
		return PeekResult{}, fmt.Errorf("forward read to leader: %w", err)
	}
	defer resp.Body.Close()
	var r PeekResult
	if resp.StatusCode != http.StatusOK {
		b := make([]byte, 64<<10)
		k, _ := resp.Body.Read(b)
		herr := decodeHTTPError(resp.StatusCode, b[:k])
		if he := herr.(*HTTPError); he.Code == "unknown_policy" {
			return r, fmt.Errorf("%w: %s", ErrUnknownPolicy, he.Detail)
		}
		return r, fmt.Errorf("forward read to leader: %w", herr)
	}
	if err := decodeJSON(resp.Body, &r); err != nil {
		return r, fmt.Errorf("forward read to leader: %w", err)
	}
	return r, nil
}

// leaderURL returns the leader's base URL, or an error when it is unknown.
func (f *forwarder) leaderURL() (string, error) {
	id, addr := f.node.Leader()
	if id == "" || addr == "" {
		return "", ErrNoLeader
	}
	return BaseURL(addr), nil
}

// admin sends an admin request on to the leader, unless it already is
// a forwarded one (then the sender's view of the leader was stale).
func (f *forwarder) admin(ctx context.Context, forwarded bool, path string, in, out any) error {
	if forwarded {
		return ErrNotLeader
	}
	url, err := f.waitLeaderURL(ctx)
	if err != nil {
		return err
	}
	if err := f.peers.postJSON(ctx, url+path, in, out); err != nil {
		return fmt.Errorf("forward to leader: %w", err)
	}
	return nil
}

// waitLeaderURL returns the leader's base URL. Right after an election the
// leader is briefly unknown; an admin call is rare enough to wait for it.
func (f *forwarder) waitLeaderURL(ctx context.Context) (string, error) {
	url, err := f.leaderURL()
	for wait := time.Now().Add(2 * time.Second); err != nil && time.Now().Before(wait); url, err = f.leaderURL() {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return url, err
}

// adminMethod is admin for any method.
func (f *forwarder) adminMethod(ctx context.Context, forwarded bool, method, path string, in, out any) error {
	if forwarded {
		return ErrNotLeader
	}
	base, err := f.waitLeaderURL(ctx)
	if err != nil {
		return err
	}
	if err := f.peers.sendJSON(ctx, method, base+path, in, out); err != nil {
		var he *HTTPError
		if errors.As(err, &he) && he.Code == "unknown_policy" {
			return fmt.Errorf("%w: %s", ErrUnknownPolicy, he.Detail)
		}
		return fmt.Errorf("forward to leader: %w", err)
	}
	return nil
}

// readPolicies reads the policy table on the leader.
func (f *forwarder) readPolicies(ctx context.Context) ([]policy.Policy, error) {
	base, err := f.waitLeaderURL(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := f.peers.do(ctx, http.MethodGet, base+PoliciesPath, "", nil)
	if err != nil {
		return nil, fmt.Errorf("forward read to leader: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b := make([]byte, 64<<10)
		k, _ := resp.Body.Read(b)
		return nil, fmt.Errorf("forward read to leader: %w", decodeHTTPError(resp.StatusCode, b[:k]))
	}
	var out struct {
		Policies []policy.Policy `json:"policies"`
	}
	if err := decodeJSON(resp.Body, &out); err != nil {
		return nil, fmt.Errorf("forward read to leader: %w", err)
	}
	return out.Policies, nil
}
