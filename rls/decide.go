package rls

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/policy"
)

// planned is one descriptor of a request and how it will be decided.
type planned struct {
	pol *policy.Policy // nil: no match (or replaced), never limited
	hit cluster.Hit
	// solo: decided on its own, not in the request's all-or-nothing group
	// (shadow_mode, quota_mode, the global shadow mode).
	solo          bool
	shadow, quota bool
	// check: hits_addend 0, a look at the counter that counts nothing;
	// peek is what it saw.
	check bool
	// refund: is_negative_hits, hit.Cost units taken off hit's key
	// (answered OK, decided apart from the others).
	refund bool
	// permit: a concurrency policy's descriptor takes a permit (release:
	// is_negative_hits gives back the key's oldest). permitOf is the
	// answer, permitted whether one was taken.
	permit, release bool
	permitOf        cluster.Permit
	permitted       bool
	peek            cluster.PeekResult
	entries         []entry
	// limit is the matched limit as the response states it, shared by
	// every response (read only; nil for an override: made per answer).
	limit          *rlsv3.RateLimitResponse_RateLimit
	domain, metric string // metric labels (metric.go)
	// at indexes the hit in its check's result.
	at int
}

// ShouldRateLimit decides every descriptor of a request. The descriptors
// that enforce are decided in one log entry, all or nothing, as POST
// /v1/check: a request refused by one spends nothing on the others.
// shadow_mode and quota_mode descriptors (every descriptor in the global
// shadow mode) are decided each on its own: counted when they have room.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if len(req.GetDescriptors()) > cluster.MaxGroup {
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors: at most %d", len(req.GetDescriptors()), cluster.MaxGroup)
	}
	if reason, removed := s.cfg.Limiter.Removed(); removed {
		// Before the policy lookup: a policy added after the removal is
		// unknown here and would read as "no limit".
		return nil, unavailable("", fmt.Errorf("%w: %s", cluster.ErrNotMember, reason))
	}
	c := s.getCall(ctx)
	defer s.putCall(c)
	t := s.currentTree()
	plan, err := s.plan(c, t, req)
	if err != nil {
		return nil, err
	}
	var enforce, solo []cluster.Hit
	if err := s.releasePermits(&c.dl, plan); err != nil {
		return nil, err
	}
	ok, err := s.takePermits(&c.dl, plan)
	if err != nil {
		return nil, err
	}
	for i := range plan {
		switch p := &plan[i]; {
		case !ok && !p.permit:
			p.pol = nil // a permit was refused: nothing else counts
		case p.pol == nil || p.pol.Envoy != nil && p.pol.Envoy.Unlimited || p.check || p.permit:
		case p.solo:
			p.at = len(solo)
			solo = append(solo, p.hit)
		default:
			p.at = len(enforce)
			if enforce == nil {
				enforce = c.hits[:0] // room for the usual request's hits
			}
			enforce = append(enforce, p.hit)
		}
	}
	if err := s.refund(&c.dl, plan); err != nil {
		return nil, err
	}
	enforced, alone, err := s.decide(c, plan, enforce, solo)
	if err == nil && len(enforce) > 0 && !enforced.Allowed {
		// The request is refused: it holds no permit either.
		s.givePermitsBack(plan)
	}
	if err != nil {
		s.givePermitsBack(plan)
		return nil, err
	}
	// respond copies what it needs: the call's room goes back after it.
	return s.respond(&c.hdr, req, plan, enforced, alone), nil
}

// plan matches each descriptor to its policy and cost, then drops the
// limits another matched limit replaces.
func (s *Server) plan(c *call, t *tree, req *rlsv3.RateLimitRequest) ([]planned, error) {
	plan := c.newPlan(len(req.GetDescriptors()))
	// Metrics name configured domains only: a caller's made-up domains
	// must not grow the label set.
	domain := req.GetDomain()
	if t.domains[domain] == nil {
		domain = "(unknown)"
	}
	var replaced map[string]bool // made for the first limit that replaces others
	for i, d := range req.GetDescriptors() {
		if len(d.GetEntries()) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d] has no entries", i)
		}
		p := &plan[i]
		p.entries = c.newEntries(len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			p.entries[j] = entry{e.GetKey(), e.GetValue()}
		}
		cost := int64(max(1, req.GetHitsAddend()))
		if h := d.GetHitsAddend(); h != nil {
			cost = int64(min(max(1, h.GetValue()), policy.MaxLimit+1))
			// Zero asks what the counter holds without adding to it.
			p.check = h.GetValue() == 0
		}
		p.domain = domain
		var m match
		if o := d.GetLimit(); o != nil {
			pol, err := s.overridePolicy(c.dl.context(), o)
			if err != nil {
				return nil, err
			}
			m = match{pol: pol, metricKey: overrideMetricKey(p.entries)}
		} else {
			m = t.match(req.GetDomain(), p.entries)
		}
		p.pol, p.metric, p.limit = m.pol, m.metricKey, m.limit
		p.hit = cluster.Hit{Client: bucket(p.entries, m.shared), Cost: cost}
		if m.pol != nil && m.pol.IsConcurrency() {
			// A permit per request: hits_addend 0 looks and takes none.
			p.hit.Policy = m.pol.Name
			p.release, p.permit = d.GetIsNegativeHits(), !d.GetIsNegativeHits() && !p.check
			if !p.permit {
				p.pol = nil
			} else {
				p.pol, p.solo = m.pol, true
			}
			continue
		}
		if d.GetIsNegativeHits() {
			// A refund of hits_addend units off the key's current window
			// (never below zero), answered OK; an unlimited or unmatched
			// one has nothing to give back.
			if m.pol != nil && (m.pol.Envoy == nil || !m.pol.Envoy.Unlimited) && !p.check {
				p.refund, p.hit.Policy = true, m.pol.Name
			}
			p.pol = nil
		}
		if p.pol == nil {
			continue
		}
		p.hit.Policy = p.pol.Name
		if e := p.pol.Envoy; e != nil {
			p.shadow, p.quota = e.ShadowMode, e.QuotaMode
			for _, r := range e.Replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[r] = true
			}
		}
		// A policy in shadow mode (rlnode's own option) is shadow_mode
		// whatever its Envoy match says.
		p.shadow = p.shadow || p.pol.IsShadow()
		p.solo = p.shadow || p.quota || s.cfg.GlobalShadowMode
	}
	for i := range plan {
		if e := plan[i].pol; e != nil && e.Envoy != nil && e.Envoy.Name != "" && replaced[e.Envoy.Name] {
			plan[i].pol = nil // another matched limit replaces it
		}
	}
	return plan, nil
}

// refund gives back the refunds of a request in one log entry, before
// its hits are decided.
func (s *Server) refund(dl *deadline, plan []planned) error {
	var hits []cluster.Hit
	for _, p := range plan {
		if p.refund {
			h := p.hit
			h.Cost = min(h.Cost, policy.MaxLimit)
			hits = append(hits, h)
		}
	}
	if len(hits) == 0 {
		return nil
	}
	if _, err := s.cfg.Refunds.Refund(dl.context(), hits); err != nil {
		return unavailable("refund", err)
	}
	return nil
}

// overridePolicy returns the policy a per-descriptor limit override counts
// against, adding it to the replicated table the first time it is used.
func (s *Server) overridePolicy(ctx context.Context, o *commonv3.RateLimitDescriptor_RateLimitOverride) (*policy.Policy, error) {
	unit := typev3.RateLimitUnit_name[int32(o.GetUnit())]
	w, ok := policy.EnvoyUnits[unit]
	if !ok || o.GetRequestsPerUnit() == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "limit override %d per %s: want requests_per_unit >= 1 and a known unit", o.GetRequestsPerUnit(), unit)
	}
	name := policy.EnvoyOverrideName(o.GetRequestsPerUnit(), unit)
	if p, ok := s.cfg.Limiter.Policy(name); ok {
		return &p, nil
	}
	// Count and add under one lock: concurrent requests each checking
	// before any had added let 600 distinct overrides past the cap.
	s.overrideMu.Lock()
	defer s.overrideMu.Unlock()
	if p, ok := s.cfg.Limiter.Policy(name); ok {
		return &p, nil
	}
	if n := s.overrides(); n >= MaxOverridePolicies {
		return nil, status.Errorf(codes.ResourceExhausted, "limit override %d per %s: the table already holds %d override policies (at most %d); delete some with rlnode policy delete",
			o.GetRequestsPerUnit(), unit, n, MaxOverridePolicies)
	}
	p := policy.Fixed(name, int64(o.GetRequestsPerUnit()), w)
	p.Align = policy.AlignEpoch // as envoyproxy/ratelimit counts overrides too
	p.Envoy = &policy.Envoy{Unit: unit, RequestsPerUnit: o.GetRequestsPerUnit()}
	if _, err := s.cfg.Limiter.SetPolicy(ctx, p); err != nil {
		return nil, unavailable("add policy "+name+" for a limit override", err)
	}
	s.addedOverrides[name] = time.Now()
	return &p, nil
}

// MaxOverridePolicies caps the policies limit overrides may add, so callers
// cannot grow the replicated table without bound.
const MaxOverridePolicies = 256

// overrides counts the override policies in this node's table, plus those
// this server added that the table here has not applied yet (a follower
// applies a committed entry a moment after the leader answers). Called with
// overrideMu held. Other nodes adding at the same moment can still pass the
// cap by one each.
func (s *Server) overrides() int {
	n := 0
	// One snapshot of the table for both counts: an entry applied between
	// two reads would be counted in neither.
	seen := map[string]bool{}
	for _, p := range s.cfg.Limiter.Policies() {
		if strings.HasPrefix(p.Name, policy.EnvoyOverridePrefix) {
			n++
			seen[p.Name] = true
		}
	}
	for name, at := range s.addedOverrides {
		switch {
		case seen[name]:
			delete(s.addedOverrides, name) // applied here now
		case time.Since(at) > 10*time.Second:
			delete(s.addedOverrides, name) // long applied, and deleted since
		default:
			n++
		}
	}
	return n
}

// decide runs the enforcing group, the solo hits and the checks at once;
// the batcher puts the hits into the same log entry when it can. A
// request whose only counted descriptor is one enforcing hit (the usual
// one) is one call on the node's lean path (checkOne).
func (s *Server) decide(c *call, plan []planned, enforce, solo []cluster.Hit) (cluster.CheckResult, []cluster.CheckResult, error) {
	if len(enforce) == 1 && len(solo) == 0 && !hasChecks(plan) {
		if res, done, err := s.checkOne(c, enforce[0]); done {
			if err != nil {
				return res, nil, unavailable("", err)
			}
			return res, nil, nil
		}
	}
	ctx := c.dl.context()
	alone := make([]cluster.CheckResult, len(solo))
	errs := make(chan error, len(solo)+len(plan))
	waits := len(solo)
	for i, h := range solo {
		go func() {
			r, err := s.cfg.Limiter.CheckAll(ctx, []cluster.Hit{h})
			alone[i] = r
			errs <- err
		}()
	}
	for i := range plan {
		if p := &plan[i]; peeks(p) {
			waits++
			go func() {
				var err error
				p.peek, err = s.cfg.Limiter.Peek(ctx, p.hit.Policy, p.hit.Client, false)
				if errors.Is(err, cluster.ErrUnknownPolicy) {
					p.pol, err = nil, nil // deleted since the tree was built
				}
				errs <- err
			}()
		}
	}
	var enforced cluster.CheckResult
	var err error
	if len(enforce) > 0 {
		// A copy: the node may still read the hits after it answered (a
		// batch that took them as the caller gave up), never the call's
		// pooled room.
		enforced, err = s.cfg.Limiter.CheckAll(ctx, slices.Clone(enforce))
	}
	for range waits {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return enforced, nil, unavailable("", err)
	}
	return enforced, alone, nil
}

// peeks says a descriptor is a hits_addend 0 look at a limited counter.
func peeks(p *planned) bool {
	return p.check && p.pol != nil && (p.pol.Envoy == nil || !p.pol.Envoy.Unlimited)
}

func hasChecks(plan []planned) bool {
	for i := range plan {
		if peeks(&plan[i]) {
			return true
		}
	}
	return false
}

// unavailable is how the rate limit service answers a call the cluster
// could not serve: always UNAVAILABLE (Envoy then applies its failure
// mode, or another rate limit service host), never a code that reads as
// the caller's fault; the message says whether it may have counted, and
// when this node was removed from the cluster, to ask another node.
func unavailable(what string, err error) error {
	switch {
	case errors.Is(err, cluster.ErrNotMember):
		err = fmt.Errorf("this node was removed from the cluster; nothing was counted; ask another node: %w", err)
	case !errors.Is(err, cluster.ErrNotCounted):
		// It may have counted: still unavailable to Envoy, but said so.
		err = fmt.Errorf("outcome unknown: %w", err)
	}
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	return status.Error(codes.Unavailable, strings.ReplaceAll(err.Error(), "\n", "; "))
}
