package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// minTTL is the shortest token-bucket assignment worth sending; a grant
// that would leave less is let lapse and the bucket denied meanwhile.
const minTTL = 10 * time.Millisecond

// bucket is one of a stream's buckets.
type bucket struct {
	id             *rlqsv3.BucketId
	policy, client string
	// mapped is false when the bucket names no leased policy: it gets no
	// assignment (Envoy's no_assignment_behavior applies).
	mapped bool
	// rate is the requests per second the last report showed; lastDemand
	// when a report last showed any.
	rate       float64
	lastDemand time.Time
	// renewAt is when the bucket needs its next assignment (zero: now).
	renewAt time.Time
	seq     uint32
}

// stream is one Envoy's stream: it is the holder of every grant behind
// the assignments it sends.
type stream struct {
	cfg    Config
	st     rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer
	holder string

	mu      sync.Mutex
	buckets map[string]*bucket
	kick    chan struct{}
	// end ends the stream with an error the assigner met (this node
	// removed from the cluster): Envoy reconnects, to another node.
	end chan error
}

func newStream(cfg Config, st rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer, scope string) (*stream, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("holder id: %w", err)
	}
	return &stream{cfg: cfg, st: st, holder: "rlqs:" + scope + ":" + hex.EncodeToString(b[:]),
		buckets: map[string]*bucket{}, kick: make(chan struct{}, 1), end: make(chan error, 1)}, nil
}

// run reads reports until the stream ends, or the assigner ends it; its
// assigner goroutine sends. Returning ends the stream, which ends a Recv
// still waiting in the reader goroutine.
func (q *stream) run() error {
	ctx, cancel := context.WithCancel(q.st.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.assignLoop(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	recvd := make(chan error, 1)
	go func() { recvd <- q.recvLoop() }()
	select {
	case err := <-recvd:
		return err
	case err := <-q.end:
		return err
	}
}

// recvLoop takes in reports until the stream ends.
func (q *stream) recvLoop() error {
	for {
		rep, err := q.st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		q.report(rep)
	}
}

// report takes in one usage report: new buckets, and each bucket's demand.
func (q *stream) report(rep *rlqsv3.RateLimitQuotaUsageReports) {
	now := time.Now()
	q.mu.Lock()
	for _, u := range rep.GetBucketQuotaUsages() {
		id := u.GetBucketId().GetBucket()
		if len(id) == 0 {
			continue
		}
		key := bucketKey(id)
		b := q.buckets[key]
		if b == nil {
			if len(q.buckets) >= q.cfg.MaxBuckets {
				q.cfg.Logger.Warn("stream has too many buckets; this one gets no assignment", "holder", q.holder, "max", q.cfg.MaxBuckets)
				continue
			}
			p, c, err := KeyOf(rep.GetDomain(), id)
			if err != nil {
				q.cfg.Logger.Warn("bucket maps onto no rlnode key; it gets no assignment", "bucket", key, "error", err)
			}
			b = &bucket{id: u.GetBucketId(), policy: p, client: c, mapped: err == nil, lastDemand: now}
			q.buckets[key] = b
		}
		n := float64(u.GetNumRequestsAllowed() + u.GetNumRequestsDenied())
		secs := u.GetTimeElapsed().AsDuration().Seconds()
		if secs < 1 {
			secs = 1 // Envoy reports whole seconds; a new bucket's first report says 0
		}
		b.rate = n / secs
		if n > 0 {
			b.lastDemand = now
		}
	}
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// assignLoop sends assignments as buckets need them, until ctx ends.
func (q *stream) assignLoop(ctx context.Context) {
	tick := time.NewTicker(min(q.cfg.Lease/10, 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-q.kick:
		}
		if actions := q.due(ctx); len(actions) > 0 {
			if err := q.st.Send(&rlqsv3.RateLimitQuotaResponse{BucketAction: actions}); err != nil {
				return
			}
		}
	}
}

// due builds the actions owed now: abandon for cold buckets, a fresh
// assignment for buckets whose current one nears its end.
func (q *stream) due(ctx context.Context) []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	now := time.Now()
	var actions []*rlqsv3.RateLimitQuotaResponse_BucketAction
	var renew []*bucket
	q.mu.Lock()
	for k, b := range q.buckets {
		switch {
		case now.Sub(b.lastDemand) > q.cfg.ColdAfter:
			delete(q.buckets, k)
			actions = append(actions, abandon(b.id))
		case b.mapped && !now.Before(b.renewAt):
			renew = append(renew, b)
		}
	}
	q.mu.Unlock()
	for _, b := range renew {
		if a := q.assign(ctx, b); a != nil {
			actions = append(actions, a)
		}
	}
	return actions
}

// assign leases units for b and turns them into an assignment whose TTL
// ends, on Envoy's clock, before the grant's deadline on ours: the
// deadline counts from when this stream sent the grant request (the
// grant's usable time: the cluster's margin, and for a token bucket its
// max-clock-offset, already taken off), less Transit for the assignment's
// trip to Envoy. A token bucket's lease is asked that much longer.
func (q *stream) assign(ctx context.Context, b *bucket) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	q.mu.Lock()
	want := int64(math.Ceil(b.rate * q.cfg.Lease.Seconds()))
	q.mu.Unlock()
	want = min(max(want, 1), policy.MaxLimit)
	p, ok := q.cfg.Leaser.Policy(b.policy)
	lease := q.cfg.Leaser.LeaseFor(ok && p.Alg() == window.TokenBucket, q.cfg.Lease)
	gctx, cancel := context.WithTimeout(ctx, q.cfg.Lease)
	defer cancel()
	sent := time.Now()
	g, err := q.cfg.Leaser.Grant(gctx, cluster.GrantRequest{Policy: b.policy, Client: b.client, Holder: q.holder, Want: want,
		Lease: lease})
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case errors.Is(err, cluster.ErrUnknownPolicy) || errors.Is(err, cluster.ErrNotLeased):
		q.cfg.Logger.Warn("bucket's policy is unknown or strict; it gets no assignment", "policy", b.policy, "error", err)
		b.mapped = false
		q.observe(b.policy, "refused", 0)
		return nil
	case errors.Is(err, cluster.ErrNotMember):
		// This node can grant nothing any more: end the stream so Envoy
		// reconnects, through its cluster, to a node that can. The live
		// assignments run out at their TTL meanwhile.
		q.observe(b.policy, "failed", 0)
		b.renewAt = time.Now().Add(q.cfg.Lease)
		select {
		case q.end <- status.Error(codes.Unavailable, "this node was removed from the cluster; nothing was granted; reconnect to another node"):
		default:
		}
		return nil
	case err != nil:
		// No assignment: the current one runs out at its TTL, then
		// Envoy's expired_assignment_behavior applies.
		q.observe(b.policy, "failed", 0)
		b.renewAt = time.Now().Add(100 * time.Millisecond)
		return nil
	}
	b.seq++
	ttl := time.Until(g.Deadline(sent)) - q.cfg.Transit
	if g.Units == 0 || ttl < minTTL {
		q.observe(b.policy, "exhausted", g.Units)
		wait := min(max(time.Duration(g.ResetAt-g.Now)*time.Millisecond, 50*time.Millisecond), q.cfg.Lease)
		b.renewAt = time.Now().Add(wait)
		// Denying is safe for any length; it outlives the retry so
		// Envoy never falls back to its expired behaviour meanwhile.
		return denyAll(b.id, wait+q.cfg.Lease)
	}
	q.observe(b.policy, "granted", g.Units)
	b.renewAt = time.Now().Add(ttl * 2 / 3)
	return tokenBucket(b.id, g.Units, ttl, b.seq)
}

func (q *stream) observe(policyName, result string, units int64) {
	if q.cfg.Observer != nil {
		q.cfg.Observer.ObserveLease(policyName, result, units)
	}
}
