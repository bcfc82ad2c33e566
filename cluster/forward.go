package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Forwarding is how a node that does not lead reaches the one that does. It
// is one unit: the peer client (peer.go), the wire codec of forwarded hits
// (wire.go) and its retry rules below, the leader operations and their
// codec (leaderops.go), and the internal endpoints on which the leader
// serves them (internal.go). Followers never decide; they forward and pass
// the leader's answer on.

// localNode is what forwarding needs from its own node.
type localNode interface {
	IsLeader() bool
	Leader() (id, httpAddr string)
	// submitLocal hands groups to this node's leader batcher.
	submitLocal(ctx context.Context, reqs ...group) []outcome
	// isRemoved says this node knows it was removed (removal.go): it
	// forwards nothing; notMember is its answer then.
	isRemoved() bool
	notMember() error
	// refusedAsNonMember records a leader's refusal naming this node a
	// non-member.
	refusedAsNonMember(leader string)
}

type forwarder struct {
	cfg   Config
	node  localNode
	peers *peerClient
	stop  <-chan struct{}
	tr    *tracer
}

func newForwarder(cfg Config, node localNode, stop <-chan struct{}, tr *tracer) *forwarder {
	peers := newPeerClient(cfg.ClusterToken, cfg.TLS, cfg.PeerTransport)
	peers.tr = tr
	return &forwarder{cfg: cfg, node: node, peers: peers, stop: stop, tr: tr}
}

func (f *forwarder) close() { f.peers.close() }

// batch is the follower's flush: one request to the leader carries
// the whole batch (and its trace context).
func (f *forwarder) batch(reqs []group, from []trace.SpanContext) func() []outcome {
	return func() []outcome {
		ctx, span := f.tr.startBatch(context.Background(), "rlnode.forward", from, hitCount(reqs))
		defer span.End()
		return f.until(ctx, reqs, time.Now().Add(f.cfg.ApplyTimeout))
	}
}

// until sends reqs to whoever leads. Attempts that certainly did not
// count (the leader refused with not-leader, the connection could not be
// opened) are retried until deadline, following leadership as it moves.
// With no leader known at all it gives up after NoLeaderWait, so a node cut
// off from the majority fails fast instead of holding callers.
func (f *forwarder) until(parent context.Context, reqs []group, deadline time.Time) []outcome {
	ctx, cancel := context.WithDeadline(parent, deadline)
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
		if f.node.isRemoved() {
			return failAll(len(reqs), notCounted(ErrNotMember, f.node.notMember()))
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
				return f.retryNotCounted(parent, reqs, outs, deadline)
			case errors.Is(err, ErrNotMember):
				// The leader no longer counts this node a member: it was
				// removed, whatever its own configuration says yet.
				f.node.refusedAsNonMember(id)
				return failAll(len(reqs), notCounted(ErrNotMember, f.node.notMember()))
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

func (f *forwarder) retryNotCounted(ctx context.Context, reqs []group, outs []outcome, deadline time.Time) []outcome {
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
	retried := f.until(ctx, again, deadline)
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
		return nil, decodeHTTPError(resp, b)
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

// leader returns the leader's id and base URL (a removed node has none
// to ask: ErrNotMember). With wait it waits up to 2 s for one to be known (right after an election the leader is briefly
// unknown, and an admin call is rare enough to wait for it).
func (f *forwarder) leader(ctx context.Context, wait bool) (id, base string, err error) {
	if f.node.isRemoved() {
		return "", "", f.node.notMember()
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		id, addr := f.node.Leader()
		if id != "" && addr != "" {
			return id, BaseURL(addr), nil
		}
		if !wait || time.Now().After(deadline) {
			return "", "", ErrNoLeader
		}
		select {
		case <-ctx.Done():
			return "", "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// call sends a leader operation (leaderops.go) to the leader and decodes
// its answer into out. An error the leader answered is returned as it
// sent it (an *HTTPError matching the cluster errors it names).
func (f *forwarder) call(ctx context.Context, wait bool, path string, in, out any) error {
	id, base, err := f.leader(ctx, wait)
	if err != nil {
		return err
	}
	if err := f.peers.sendJSON(ctx, http.MethodPost, base+path, in, out); err != nil {
		if errors.Is(err, ErrNotMember) {
			f.node.refusedAsNonMember(id)
			return f.node.notMember()
		}
		return fromLeader(id, err)
	}
	return nil
}

// fromLeader wraps a failure to reach the leader; the leader's own answer
// stays as it is.
func fromLeader(id string, err error) error {
	var he *HTTPError
	switch {
	case errors.As(err, &he) && he.Status == http.StatusNotFound && he.Code == "not_found":
		return fmt.Errorf("leader %s does not serve this operation: it runs an older rlnode; upgrade it, or transfer leadership to an upgraded node: %w", id, err)
	case errors.As(err, &he):
		return err
	}
	return fmt.Errorf("forward to leader %s: %w", id, err)
}

// backup streams the leader's backup into w.
func (f *forwarder) backup(ctx context.Context, w io.Writer) error {
	id, base, err := f.leader(ctx, true)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	resp, err := f.peers.send(ctx, http.MethodGet, base+backupPath, "", nil, 0)
	if err != nil {
		return fromLeader(id, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("backup from leader %s: %w", id, err)
	}
	return nil
}

// restore streams a backup to the leader's restore.
func (f *forwarder) restore(ctx context.Context, r io.Reader, size int64, force bool) (Restored, error) {
	var res Restored
	id, base, err := f.leader(ctx, true)
	if err != nil {
		return res, fmt.Errorf("restore: %w", err)
	}
	url := base + restorePath
	if force {
		url += "?force=true"
	}
	resp, err := f.peers.send(ctx, http.MethodPost, url, "application/octet-stream", r, size)
	if err != nil {
		return res, fromLeader(id, err)
	}
	defer resp.Body.Close()
	if err := decodeJSON(resp.Body, &res); err != nil {
		return res, fmt.Errorf("restore on leader %s: read its answer: %w", id, err)
	}
	return res, nil
}

// ServeHTTP is the leader's ForwardPath: a batch of forwarded hits in, their
// outcomes out (wire.go).
func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeProblem(w, http.StatusMethodNotAllowed, "invalid_request", fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<20))
	if err != nil {
		writeProblem(w, http.StatusRequestEntityTooLarge, "invalid_request", "forward body: "+err.Error())
		return
	}
	out, err := f.serve(r.Context(), body)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	f.cfg.Observer.ForwardServed()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	w.Write(out)
}
