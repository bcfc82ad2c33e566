package rls

import (
	"math"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/policy"
	"github.com/rlnode/rlnode/window"
)

// verdicts gathers what the response's overall code and headers follow.
type verdicts struct {
	over, quotaOver, quota int
	retryMs                int64
	// closest is the descriptor nearest its limit (envoyproxy/ratelimit's
	// response headers describe it).
	closest *rlsv3.RateLimitResponse_DescriptorStatus
	passed  []int // descriptors that were not over their limit
}

func (s *Server) respond(req *rlsv3.RateLimitRequest, plan []planned, enforced cluster.CheckResult, alone []cluster.CheckResult) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(plan))}
	var hdr headerItems
	var v verdicts
	for i := range plan {
		p := &plan[i]
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		switch {
		case p.pol == nil:
			s.observe(p.domain, "no_match")
			v.passed = append(v.passed, i)
			continue
		case p.pol.Envoy != nil && p.pol.Envoy.Unlimited:
			st.LimitRemaining = math.MaxUint32
			s.observe(p.domain, "unlimited")
			v.passed = append(v.passed, i)
			continue
		}
		if p.permit {
			s.describePermit(st, p, &v)
			if st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
				v.passed = append(v.passed, i)
			}
			continue
		}
		if p.check {
			s.describeCheck(st, p)
			if st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
				v.passed = append(v.passed, i)
				v.closer(st)
			} else {
				v.over++
				v.closest = st
			}
			continue
		}
		res := enforced
		if p.solo {
			res = alone[p.at]
			p.at = 0
		}
		if p.at >= len(res.Hits) || res.Hits[p.at].UnknownPolicy {
			// Deleted since the tree was built: nothing limits it now.
			s.observe(p.domain, "no_match")
			v.passed = append(v.passed, i)
			continue
		}
		s.describe(st, p, res.Hits[p.at], res.Now, res.Allowed, &hdr, &v)
		if st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			v.passed = append(v.passed, i)
		}
	}
	if v.over > 0 || v.quota > 0 && v.quotaOver == v.quota {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		if s.cfg.GlobalShadowMode {
			resp.OverallCode = rlsv3.RateLimitResponse_OK
			s.observe(req.GetDomain(), "global_shadow_mode")
		}
	}
	resp.ResponseHeadersToAdd = hdr.headers()
	if h := s.cfg.ResponseHeaders; h != nil && v.closest != nil {
		c := v.closest
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&corev3.HeaderValue{Key: h.Limit, Value: strconv.FormatUint(uint64(c.GetCurrentLimit().GetRequestsPerUnit()), 10)},
			&corev3.HeaderValue{Key: h.Remaining, Value: strconv.FormatUint(uint64(c.GetLimitRemaining()), 10)},
			&corev3.HeaderValue{Key: h.Reset, Value: strconv.FormatInt(c.GetDurationUntilReset().GetSeconds(), 10)})
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&corev3.HeaderValue{Key: "retry-after", Value: strconv.FormatInt(max(1, (v.retryMs+999)/1000), 10)})
	}
	if s.cfg.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, plan, v.passed)
	}
	return resp
}

// describe fills one limited descriptor's status from its decision.
func (s *Server) describe(st *rlsv3.RateLimitResponse_DescriptorStatus, p *planned, h cluster.HitResult, now int64, counted bool, hdr *headerItems, v *verdicts) {
	m := h.MainPart()
	st.CurrentLimit = currentLimit(p.pol)
	st.LimitRemaining = uint32(min(max(m.Remaining, 0), math.MaxUint32))
	// Whole seconds, rounded up: on an epoch-aligned window this is
	// exactly envoyproxy/ratelimit's unit - now % unit.
	st.DurationUntilReset = durationpb.New(time.Duration((max(0, m.ResetAt-now)+999)/1000) * time.Second)
	hdr.add(p.pol, m, now)
	s.count(p, h, m, counted)
	if p.quota {
		v.quota++
	}
	if h.Outcome == window.Allowed && !h.WouldRefuse() {
		s.observe(p.domain, "ok")
		v.closer(st)
		return
	}
	st.LimitRemaining = 0
	if p.shadow {
		s.observe(p.domain, "shadow_over_limit")
		v.closer(st)
		return
	}
	st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	s.observe(p.domain, "over_limit")
	if p.quota {
		v.quotaOver++
		v.closer(st)
	} else {
		v.over++
		v.closest = st // a refusal is what the headers must explain
	}
	r := m.RetryAfterMs
	for _, part := range h.Parts {
		if part.Outcome == window.Refused {
			r = max(r, part.RetryAfterMs)
		}
	}
	v.retryMs = max(v.retryMs, r, 0)
}

// describeCheck fills the status of a descriptor whose hits_addend is 0
// from what its counter holds: OK unless it is already past the limit (a
// lowered limit), as envoyproxy/ratelimit's increment by 0 answers.
func (s *Server) describeCheck(st *rlsv3.RateLimitResponse_DescriptorStatus, p *planned) {
	st.CurrentLimit = currentLimit(p.pol)
	pk := p.peek
	st.LimitRemaining = uint32(min(max(pk.Remaining, 0), math.MaxUint32))
	// The time left is for display only (no decision reads it): this
	// node's clock, never behind what the cluster applied.
	now := max(time.Now().UnixMilli(), pk.AppliedNow)
	w := pk.WindowMs
	reset := now + w // a hit now would open a window
	switch {
	case w > 0 && p.pol.EpochAligned():
		reset = now - now%w + w
	case p.pol.CalendarAligned() && pk.ResetAt > 0:
		reset = pk.ResetAt // the current period's end, active or not
	case pk.Active:
		reset = pk.ResetAt
	}
	st.DurationUntilReset = durationpb.New(time.Duration((max(0, reset-now)+999)/1000) * time.Second)
	if pk.Used > pk.Limit {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		st.LimitRemaining = 0
		s.observe(p.domain, "over_limit")
		return
	}
	s.observe(p.domain, "ok")
}

// closer keeps st as the closest descriptor if it has less left (a
// refusal, once seen, stays).
func (v *verdicts) closer(st *rlsv3.RateLimitResponse_DescriptorStatus) {
	if v.over > 0 {
		return
	}
	if v.closest == nil || st.LimitRemaining < v.closest.LimitRemaining {
		v.closest = st
	}
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
