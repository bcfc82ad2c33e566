package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/grpcserve"
	"github.com/rlnode/rlnode/lease"
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
	// lastReport is when a report last named the bucket, every its
	// reporting interval as seen here; renewUntil ends the renewals one
	// report's demand pays for (see demand.go).
	lastReport, renewUntil time.Time
	every                  time.Duration
	// renewAt is when the bucket needs its next assignment (zero: now).
	renewAt time.Time
	seq     uint32
}

// stream is one Envoy's stream: it is the holder of every grant behind
// the assignments it sends.
type stream struct {
	cfg Config
	// rules are the lease core's for an Envoy stream: sizing, renewal,
	// recheck (lease.EnvoyConfig; lease/DESIGN.md).
	rules  lease.Config
	st     rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer
	holder string

	// grants is the node's budget of grant entries, shared by streams;
	// bucketBudget the node's budget of buckets, counted for cred.
	grants       *grantBudget
	bucketBudget *grpcserve.Budget
	cred         string

	mu      sync.Mutex
	buckets map[string]*bucket
	kick    chan struct{}
	// end ends the stream with an error the assigner met (this node
	// removed from the cluster): Envoy reconnects, to another node.
	end chan error
	// closed: the handler has returned and given the buckets back; a
	// report the receiver still takes in is dropped.
	closed bool
}

func newStream(cfg Config, st rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer, scope string, grants *grantBudget) (*stream, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("holder id: %w", err)
	}
	return &stream{cfg: cfg, rules: lease.EnvoyConfig(cfg.Lease, policy.MaxLimit), st: st, holder: "rlqs:" + scope + ":" + hex.EncodeToString(b[:]),
		grants: grants, buckets: map[string]*bucket{}, kick: make(chan struct{}, 1), end: make(chan error, 1)}, nil
}

// run reads reports until the stream ends, sends none for StreamIdle, or
// the assigner ends it (end); its assigner goroutine sends.
func (q *stream) run() error {
	q.grants.join(q.holder)
	defer q.grants.leave(q.holder)
	defer q.dropBuckets()
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
	// The receiver's owner is the stream itself: Recv returns once this
	// handler has returned and gRPC has ended the stream.
	reported, ended := make(chan struct{}, 1), make(chan error, 1)
	go func() { ended <- q.receive(reported) }()
	idle := time.NewTimer(q.cfg.StreamIdle)
	defer idle.Stop()
	for {
		select {
		case err := <-ended:
			return err
		case err := <-q.end:
			return err
		case <-reported:
			if _, removed := q.cfg.Node.Removed(); removed {
				return errRemoved
			}
			idle.Reset(q.cfg.StreamIdle)
		case <-idle.C:
			q.cfg.Logger.Debug("closing a stream that sent no usage report", "holder", q.holder, "idle", q.cfg.StreamIdle)
			return status.Errorf(codes.DeadlineExceeded, "no usage report for %s: stream closed (open a new one to report)", q.cfg.StreamIdle)
		}
	}
}

// receive takes in reports until the stream ends (nil when the client
// closed it), signalling each on reported.
func (q *stream) receive(reported chan<- struct{}) error {
	for {
		rep, err := q.st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		q.report(rep)
		select {
		case reported <- struct{}{}:
		default:
		}
	}
}

// report takes in one usage report: new buckets, and each bucket's demand.
func (q *stream) report(rep *rlqsv3.RateLimitQuotaUsageReports) {
	now := time.Now()
	var skipped map[string]int // buckets that get no assignment, by why
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	for _, u := range rep.GetBucketQuotaUsages() {
		id := u.GetBucketId().GetBucket()
		if len(id) == 0 {
			continue
		}
		key := bucketKey(id)
		b := q.buckets[key]
		if b == nil {
			if b = q.newBucket(rep.GetDomain(), u.GetBucketId(), now, &skipped); b == nil {
				continue
			}
			q.buckets[key] = b
		}
		n := float64(u.GetNumRequestsAllowed() + u.GetNumRequestsDenied())
		secs := u.GetTimeElapsed().AsDuration().Seconds()
		if secs < 1 {
			secs = 1 // Envoy reports whole seconds; a new bucket's first report says 0
		}
		b.rate = n / secs
		q.sawReport(b, now, n > 0)
	}
	q.mu.Unlock()
	for why, n := range skipped {
		q.cfg.Logger.Warn("buckets of a report get no assignment", "holder", q.holder, "buckets", n, "why", why)
	}
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// newBucket makes the stream's bucket for id, or nil when a budget is
// full (counted in skipped, for one warning per report). A bucket that
// maps onto no rlnode key is made (so it is not looked at again) but
// never assigned. Called with q.mu held.
func (q *stream) newBucket(domain string, id *rlqsv3.BucketId, now time.Time, skipped *map[string]int) *bucket {
	skip := func(why string) *bucket {
		if *skipped == nil {
			*skipped = map[string]int{}
		}
		(*skipped)[why]++
		return nil
	}
	if len(q.buckets) >= q.cfg.MaxBuckets {
		return skip(fmt.Sprintf("the stream has its limit of %d buckets", q.cfg.MaxBuckets))
	}
	switch q.bucketBudget.Take(q.cred) {
	case grpcserve.FullNode:
		return skip(fmt.Sprintf("the node's streams have their limit of %d buckets (--rlqs-max-buckets)", q.cfg.NodeBuckets))
	case grpcserve.FullCredential:
		return skip(fmt.Sprintf("the credential's streams have their limit of %d buckets (--rlqs-max-buckets-per-credential)", q.cfg.CredentialBuckets))
	}
	p, c, err := KeyOf(domain, id.GetBucket())
	if err == nil {
		// A bad key would fail the whole grant entry it shares with the
		// stream's other buckets: it gets none.
		err = cluster.GrantItem{Policy: p, Client: c, Want: 1}.Validate()
	}
	if err != nil {
		q.cfg.Logger.Debug("bucket maps onto no rlnode key", "bucket", bucketKey(id.GetBucket()), "error", err)
		skip("they map onto no rlnode key (no policy entry and no domain, or a bad policy name)")
	}
	return &bucket{id: id, policy: p, client: c, mapped: err == nil, lastDemand: now}
}

// dropBuckets gives the stream's buckets back to the node's budget.
func (q *stream) dropBuckets() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.bucketBudget.Release(q.cred, len(q.buckets))
	q.buckets, q.closed = map[string]*bucket{}, true
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

// due builds the actions owed now: abandon for cold buckets, fresh
// assignments for buckets with demand whose current one nears its end
// (with them, those due soon, so one grant entry renews them together).
func (q *stream) due(ctx context.Context) []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	now := time.Now()
	var actions []*rlqsv3.RateLimitQuotaResponse_BucketAction
	q.mu.Lock()
	for k, b := range q.buckets {
		if now.Sub(b.lastDemand) > q.cfg.ColdAfter {
			delete(q.buckets, k)
			q.bucketBudget.Release(q.cred, 1)
			actions = append(actions, abandon(b.id))
		}
	}
	renew := q.renewable(now)
	q.mu.Unlock()
	return append(actions, q.renew(ctx, renew)...)
}

// want is how many units to ask for b: the lease core's sizing of its
// last reported rate (lease.EnvoyConfig: one lease of it, at least one).
// Called with q.mu held.
func (q *stream) want(b *bucket) int64 {
	return q.rules.Size(b.rate, 0)
}

// lease is the lease to ask for b's grant: a token bucket's is asked
// longer by the cluster's clock bound, so that its usable time is Lease.
func (q *stream) lease(b *bucket) time.Duration {
	p, ok := q.cfg.Node.Policy(b.policy)
	return q.cfg.Leases.LeaseFor(ok && p.Alg() == window.TokenBucket, q.cfg.Lease)
}

// settle turns b's grant (or the error of asking for it) into an
// assignment whose TTL ends, on Envoy's clock, before the grant's
// deadline on ours (on both our clocks, lease.Deadline): the deadline counts from when this stream sent the
// grant request (the grant's usable time: the cluster's margin, and for a
// token bucket its max-clock-offset, already taken off), less Transit for
// the assignment's trip to Envoy. Called with q.mu held.
func (q *stream) settle(b *bucket, g cluster.Grant, err error, sent time.Time) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	if err == nil && g.NoSlice {
		// A region's global policy whose slices are spent or not come
		// yet: a failure (ask again after the back-off), never "strict".
		err = cluster.ErrParentUnreachable
	}
	switch {
	case errors.Is(err, cluster.ErrUnknownPolicy) || errors.Is(err, cluster.ErrNotLeased) || (err == nil && g.ID == 0 && g.Units == 0):
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
		case q.end <- errRemoved:
		default:
		}
		return nil
	case err != nil:
		// No assignment: the current one runs out at its TTL, then
		// Envoy's expired_assignment_behavior applies.
		q.observe(b.policy, "failed", 0)
		b.renewAt = time.Now().Add(q.rules.FailBackoff)
		return nil
	}
	b.seq++
	ttl := g.Deadline(sent).Left(time.Now()) - q.cfg.Transit
	if g.Units == 0 || ttl < minTTL {
		q.observe(b.policy, "exhausted", g.Units)
		wait := max(q.rules.RecheckIn(time.Duration(g.ResetAt-g.Now)*time.Millisecond), q.rules.FailBackoff)
		b.renewAt = time.Now().Add(wait)
		// Denying is safe for any length; it outlives the retry so
		// Envoy never falls back to its expired behaviour meanwhile.
		return denyAll(b.id, wait+q.cfg.Lease)
	}
	q.observe(b.policy, "granted", g.Units)
	b.renewAt = time.Now().Add(q.rules.RenewIn(ttl))
	return tokenBucket(b.id, g.Units, ttl, b.seq)
}

func (q *stream) observe(policyName, result string, units int64) {
	if q.cfg.Observer != nil {
		q.cfg.Observer.ObserveLease(policyName, result, units)
	}
}
