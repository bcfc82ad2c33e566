package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// planned is one descriptor of a request and how it will be decided.
type planned struct {
	pol    *policy.Policy // nil: no match, never limited
	hit    cluster.Hit
	shadow bool
	// at indexes the hit in its check's result.
	at int
}

// ShouldRateLimit decides every descriptor of a request. The descriptors
// that enforce are decided in one log entry, all or nothing, as POST
// /v1/check: a request refused by one spends nothing on the others.
// shadow_mode descriptors are decided each on its own: counted when they
// have room, reported, never refusing.
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
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	t := s.currentTree()
	plan, err := s.plan(ctx, t, req)
	if err != nil {
		return nil, err
	}
	var enforce, shadow []cluster.Hit
	for i := range plan {
		switch p := &plan[i]; {
		case p.pol == nil || p.pol.Envoy != nil && p.pol.Envoy.Unlimited:
		case p.shadow:
			p.at = len(shadow)
			shadow = append(shadow, p.hit)
		default:
			p.at = len(enforce)
			enforce = append(enforce, p.hit)
		}
	}
	enforced, shadowed, err := s.decide(ctx, enforce, shadow)
	if err != nil {
		return nil, err
	}
	// Metrics name configured domains only: a caller's made-up domains
	// must not grow the label set.
	label := req.GetDomain()
	if t.domains[label] == nil {
		label = "(unknown)"
	}
	return s.respond(label, plan, enforced, shadowed), nil
}

// plan matches each descriptor to its policy and cost.
func (s *Server) plan(ctx context.Context, t *tree, req *rlsv3.RateLimitRequest) ([]planned, error) {
	plan := make([]planned, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		if len(d.GetEntries()) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d] has no entries", i)
		}
		entries := make([]entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			entries[j] = entry{e.GetKey(), e.GetValue()}
		}
		cost := int64(max(1, req.GetHitsAddend()))
		if h := d.GetHitsAddend(); h != nil {
			cost = int64(min(max(1, h.GetValue()), policy.MaxLimit+1))
		}
		p := &plan[i]
		p.hit = cluster.Hit{Client: bucket(entries), Cost: cost}
		if o := d.GetLimit(); o != nil {
			pol, err := s.overridePolicy(ctx, o)
			if err != nil {
				return nil, err
			}
			p.pol = pol
		} else {
			p.pol = t.match(req.GetDomain(), entries)
		}
		if p.pol != nil {
			p.hit.Policy = p.pol.Name
			p.shadow = p.pol.Envoy != nil && p.pol.Envoy.ShadowMode
		}
	}
	return plan, nil
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
	p.Envoy = &policy.Envoy{Unit: unit, RequestsPerUnit: o.GetRequestsPerUnit()}
	if _, err := s.cfg.Limiter.SetPolicy(ctx, p); err != nil {
		return nil, status.Errorf(codes.Unavailable, "add policy %s for a limit override: %v", name, err)
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

// decide runs the enforcing group and the shadow hits at once; the batcher
// puts them into the same log entry when it can.
func (s *Server) decide(ctx context.Context, enforce, shadow []cluster.Hit) (cluster.CheckResult, []cluster.CheckResult, error) {
	shadowed := make([]cluster.CheckResult, len(shadow))
	errs := make(chan error, len(shadow))
	for i, h := range shadow {
		go func() {
			r, err := s.cfg.Limiter.CheckAll(ctx, []cluster.Hit{h})
			shadowed[i] = r
			errs <- err
		}()
	}
	var enforced cluster.CheckResult
	var err error
	if len(enforce) > 0 {
		enforced, err = s.cfg.Limiter.CheckAll(ctx, enforce)
	}
	for range shadow {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		code := codes.Unavailable
		if !errors.Is(err, cluster.ErrNotCounted) {
			// It may have counted: still unavailable to Envoy, which then
			// applies its failure mode, but said so.
			err = fmt.Errorf("outcome unknown: %w", err)
		}
		return enforced, nil, status.Error(code, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return enforced, shadowed, nil
}

func (s *Server) respond(domain string, plan []planned, enforced cluster.CheckResult, shadowed []cluster.CheckResult) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(plan))}
	var hdr headerItems
	retryMs := int64(0)
	for i, p := range plan {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		switch {
		case p.pol == nil:
			s.observe(domain, "no_match")
			continue
		case p.pol.Envoy != nil && p.pol.Envoy.Unlimited:
			st.LimitRemaining = math.MaxUint32
			s.observe(domain, "unlimited")
			continue
		}
		res, now := enforced, enforced.Now
		if p.shadow {
			res, now = shadowed[p.at], shadowed[p.at].Now
			p.at = 0
		}
		if p.at >= len(res.Hits) || res.Hits[p.at].UnknownPolicy {
			// Deleted since the tree was built: nothing limits it now.
			s.observe(domain, "no_match")
			continue
		}
		h := res.Hits[p.at]
		m := h.MainPart()
		st.CurrentLimit = currentLimit(p.pol)
		st.LimitRemaining = uint32(min(max(m.Remaining, 0), math.MaxUint32))
		st.DurationUntilReset = durationpb.New(time.Duration(max(0, m.ResetAt-now)) * time.Millisecond)
		hdr.add(p.pol, m, now)
		if h.Outcome == window.Allowed {
			s.observe(domain, "ok")
			continue
		}
		st.LimitRemaining = 0
		if p.shadow {
			s.observe(domain, "shadow_over_limit")
			continue
		}
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		s.observe(domain, "over_limit")
		r := m.RetryAfterMs
		for _, part := range h.Parts {
			if part.Outcome == window.Refused {
				r = max(r, part.RetryAfterMs)
			}
		}
		retryMs = max(retryMs, r, 0)
	}
	resp.ResponseHeadersToAdd = hdr.headers()
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&corev3.HeaderValue{Key: "retry-after", Value: strconv.FormatInt(max(1, (retryMs+999)/1000), 10)})
	}
	return resp
}

func (s *Server) observe(domain, result string) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.RLSDescriptor(domain, result)
	}
}

func currentLimit(p *policy.Policy) *rlsv3.RateLimitResponse_RateLimit {
	cl := &rlsv3.RateLimitResponse_RateLimit{}
	if e := p.Envoy; e != nil {
		cl.Name = e.Name
		cl.RequestsPerUnit = e.RequestsPerUnit
		cl.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(rlsv3.RateLimitResponse_RateLimit_Unit_value[e.Unit])
	}
	return cl
}

// headerItems collects the IETF RateLimit-Policy and RateLimit items, one
// per limited descriptor.
type headerItems struct{ pol, rl []string }

func (h *headerItems) add(p *policy.Policy, m window.Result, now int64) {
	name := p.Name
	if p.Envoy != nil && p.Envoy.Name != "" {
		name = p.Envoy.Name
	}
	q := strconv.Quote(name)
	h.pol = append(h.pol, q+";q="+strconv.FormatInt(m.Limit, 10)+";w="+strconv.FormatInt((m.WindowMs+999)/1000, 10))
	h.rl = append(h.rl, q+";r="+strconv.FormatInt(max(0, m.Remaining), 10)+";t="+strconv.FormatInt(max(0, (m.ResetAt-now+999)/1000), 10))
}

func (h *headerItems) headers() []*corev3.HeaderValue {
	if len(h.pol) == 0 {
		return nil
	}
	return []*corev3.HeaderValue{
		{Key: "ratelimit-policy", Value: strings.Join(h.pol, ", ")},
		{Key: "ratelimit", Value: strings.Join(h.rl, ", ")},
	}
}
