// Package rlqstest is a Go stand-in for Envoy's rate limit quota filter,
// for tests of rlnode's RLQS server (Envoy itself cannot run here). It
// behaves as the filter does: the first request of a bucket is decided by
// the no-assignment behaviour and reported at once; every bucket is
// reported every reporting interval (requests allowed and denied, whole
// seconds elapsed); an assignment applies from when it arrives until its
// time to live runs out, then the expired-assignment behaviour applies; a
// token-bucket assignment equal to the previous one keeps the old bucket
// (with what is left in it), a different one starts a full bucket whose
// rate is tokens per fill over the fill interval's whole seconds;
// requests_per_time_unit is ignored (Envoy does not support it); an
// abandon action drops the bucket.
package rlqstest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Config configures a simulated Envoy.
type Config struct {
	Addr   string
	Domain string
	// Interval is the filter's reporting_interval (default 1s).
	Interval time.Duration
	// AllowWithoutAssignment and AllowWhenExpired are the filter's
	// no_assignment_behavior and expired_assignment_behavior: false is
	// DENY_ALL (the default here), true ALLOW_ALL.
	AllowWithoutAssignment, AllowWhenExpired bool
	Token                                    string
	TLS                                      *tls.Config
}

type bucket struct {
	id              map[string]string
	allowed, denied uint64
	lastReport      time.Time

	assigned bool
	deny     bool // a blanket DENY_ALL (ALLOW_ALL sets allow)
	allow    bool
	expires  time.Time
	tb       *typev3.TokenBucket
	tokens   float64
	rate     float64
	refilled time.Time
}

// Envoy is one simulated Envoy with its stream to the server.
type Envoy struct {
	cfg    Config
	conn   *grpc.ClientConn
	stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	cancel context.CancelFunc
	wg     sync.WaitGroup

	sendMu sync.Mutex
	mu     sync.Mutex
	bkts   map[string]*bucket
	// Counters for tests.
	Assignments, Abandons, Expiries int
	// ended is how the server ended the stream (nil while it runs).
	ended error
}

// Ended is the error the stream ended with (nil while it runs): a
// server that can serve no more ends it with codes.Unavailable.
func (e *Envoy) Ended() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ended
}

// Start connects and starts reporting.
func Start(cfg Config) (*Envoy, error) {
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	conn, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.Token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+cfg.Token)
	}
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		cancel()
		conn.Close()
		return nil, err
	}
	e := &Envoy{cfg: cfg, conn: conn, stream: st, cancel: cancel, bkts: map[string]*bucket{}}
	e.wg.Add(2)
	go e.receive()
	go e.reportEvery()
	return e, nil
}

// Close ends the stream.
func (e *Envoy) Close() {
	e.cancel()
	e.conn.Close()
	e.wg.Wait()
}

func keyOf(id map[string]string) string {
	ks := make([]string, 0, len(id))
	for k, v := range id {
		ks = append(ks, k+"="+v)
	}
	sort.Strings(ks)
	return strings.Join(ks, "&")
}

// Allow decides one request of bucket id as the filter would.
func (e *Envoy) Allow(id map[string]string) bool {
	now := time.Now()
	e.mu.Lock()
	k := keyOf(id)
	b := e.bkts[k]
	if b == nil {
		b = &bucket{id: id, lastReport: now}
		e.bkts[k] = b
		ok := e.cfg.AllowWithoutAssignment
		b.count(ok)
		rep := e.reportOf([]*bucket{b}, now)
		e.mu.Unlock()
		e.send(rep)
		return ok
	}
	ok := b.decide(now, e)
	b.count(ok)
	e.mu.Unlock()
	return ok
}

func (b *bucket) count(ok bool) {
	if ok {
		b.allowed++
	} else {
		b.denied++
	}
}

func (b *bucket) decide(now time.Time, e *Envoy) bool {
	switch {
	case !b.assigned:
		return e.cfg.AllowWithoutAssignment
	case !now.Before(b.expires):
		if b.tb != nil || b.deny || b.allow {
			e.Expiries++
			b.tb, b.deny, b.allow = nil, false, false
		}
		return e.cfg.AllowWhenExpired
	case b.deny:
		return false
	case b.allow:
		return true
	case b.tb != nil:
		b.tokens = min(float64(b.tb.GetMaxTokens()), b.tokens+b.rate*now.Sub(b.refilled).Seconds())
		b.refilled = now
		if b.tokens >= 1 {
			b.tokens--
			return true
		}
		return false
	}
	return false
}

func (e *Envoy) reportOf(bs []*bucket, now time.Time) *rlqsv3.RateLimitQuotaUsageReports {
	rep := &rlqsv3.RateLimitQuotaUsageReports{Domain: e.cfg.Domain}
	for _, b := range bs {
		rep.BucketQuotaUsages = append(rep.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqsv3.BucketId{Bucket: b.id}, NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied,
			TimeElapsed: durationpb.New(now.Sub(b.lastReport).Truncate(time.Second))})
		b.allowed, b.denied, b.lastReport = 0, 0, now
	}
	return rep
}

func (e *Envoy) send(rep *rlqsv3.RateLimitQuotaUsageReports) {
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	_ = e.stream.Send(rep)
}

func (e *Envoy) reportEvery() {
	defer e.wg.Done()
	tick := time.NewTicker(e.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-e.stream.Context().Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		e.mu.Lock()
		bs := make([]*bucket, 0, len(e.bkts))
		for _, b := range e.bkts {
			bs = append(bs, b)
		}
		rep := e.reportOf(bs, now)
		e.mu.Unlock()
		if len(bs) > 0 {
			e.send(rep)
		}
	}
}

func (e *Envoy) receive() {
	defer e.wg.Done()
	for {
		resp, err := e.stream.Recv()
		if err != nil {
			e.mu.Lock()
			e.ended = err
			e.mu.Unlock()
			return
		}
		now := time.Now()
		e.mu.Lock()
		for _, a := range resp.GetBucketAction() {
			e.apply(a, now)
		}
		e.mu.Unlock()
	}
}

func (e *Envoy) apply(a *rlqsv3.RateLimitQuotaResponse_BucketAction, now time.Time) {
	k := keyOf(a.GetBucketId().GetBucket())
	b := e.bkts[k]
	if b == nil {
		return // not a bucket of ours: the filter ignores it
	}
	if a.GetAbandonAction() != nil {
		delete(e.bkts, k)
		e.Abandons++
		return
	}
	qa := a.GetQuotaAssignmentAction()
	if qa == nil {
		return
	}
	s := qa.GetRateLimitStrategy()
	switch {
	case s.GetTokenBucket() != nil:
		tb := s.GetTokenBucket()
		if !(b.tb != nil && sameBucket(b.tb, tb)) {
			secs := int64(tb.GetFillInterval().AsDuration() / time.Second)
			b.tokens, b.refilled, b.rate = float64(tb.GetMaxTokens()), now, 0
			if secs > 0 {
				b.rate = float64(tb.GetTokensPerFill().GetValue()) / float64(secs)
			}
		}
		b.tb, b.deny, b.allow = tb, false, false
	case s.GetRequestsPerTimeUnit() != nil:
		return // unsupported by Envoy: ignored
	default:
		b.tb = nil
		b.deny = s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL
		b.allow = !b.deny
	}
	b.assigned = true
	b.expires = now.Add(qa.GetAssignmentTimeToLive().AsDuration())
	e.Assignments++
}

// sameBucket is the filter's equality of token-bucket assignments.
func sameBucket(a, b *typev3.TokenBucket) bool {
	return a.GetMaxTokens() == b.GetMaxTokens() && a.GetTokensPerFill().GetValue() == b.GetTokensPerFill().GetValue() &&
		a.GetFillInterval().GetNanos() == b.GetFillInterval().GetNanos()
}

// Counts returns the assignments, abandons and expiries seen so far.
func (e *Envoy) Counts() (assignments, abandons, expiries int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.Assignments, e.Abandons, e.Expiries
}

// WaitAssigned waits until bucket id has an assignment.
func (e *Envoy) WaitAssigned(ctx context.Context, id map[string]string) error {
	for {
		e.mu.Lock()
		b := e.bkts[keyOf(id)]
		ok := b != nil && b.assigned
		e.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), fmt.Errorf("bucket %v got no assignment", id))
		case <-time.After(10 * time.Millisecond):
		}
	}
}
