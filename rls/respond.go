package rls

import (
	"math"
	"strconv"
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

// oneAnswer is a one-descriptor response (the usual request) made in one
// allocation: the response, its status and the status's time left.
type oneAnswer struct {
	resp     rlsv3.RateLimitResponse
	statuses [1]*rlsv3.RateLimitResponse_DescriptorStatus
	st       rlsv3.RateLimitResponse_DescriptorStatus
	left     durationpb.Duration
}

// newResponse makes a response with n statuses, OK, and room for the
// first status's time left (nil when each is made apart).
func newResponse(n int) (*rlsv3.RateLimitResponse, *durationpb.Duration) {
	if n == 1 {
		a := &oneAnswer{}
		a.resp.Statuses = a.statuses[:]
		a.statuses[0] = &a.st
		return &a.resp, &a.left
	}
	resp := &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{}
	}
	return resp, nil
}

// seconds is a whole number of seconds as a Duration, in room when given.
func seconds(room *durationpb.Duration, secs int64) *durationpb.Duration {
	if room == nil {
		return &durationpb.Duration{Seconds: secs}
	}
	room.Seconds = secs
	return room
}

// respond writes the response; hdr is room for its header values (the
// call's, reused: the values are copied out as strings).
func (s *Server) respond(hdr *headerItems, req *rlsv3.RateLimitRequest, plan []planned, enforced cluster.CheckResult, alone []cluster.CheckResult) *rlsv3.RateLimitResponse {
	resp, left := newResponse(len(plan))
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	hdr.pol, hdr.rl = hdr.pol[:0], hdr.rl[:0]
	var v verdicts
	for i := range plan {
		p := &plan[i]
		st := resp.Statuses[i]
		st.Code = rlsv3.RateLimitResponse_OK
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
			s.describeCheck(st, p, left)
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
		s.describe(st, left, p, res.Hits[p.at], res.Now, res.Allowed, hdr, &v)
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
	extra := 0
	h := s.cfg.ResponseHeaders
	if h != nil && v.closest != nil {
		extra += 3
	}
	over := resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT
	if over {
		extra++
	}
	// Every header is in the room headers made: add fills the next.
	hs := hdr.headers(extra)
	add := func(k, v string) {
		hs = hs[:len(hs)+1]
		hs[len(hs)-1].Key, hs[len(hs)-1].Value = k, v
	}
	if h != nil && v.closest != nil {
		c := v.closest
		add(h.Limit, strconv.FormatUint(uint64(c.GetCurrentLimit().GetRequestsPerUnit()), 10))
		add(h.Remaining, strconv.FormatUint(uint64(c.GetLimitRemaining()), 10))
		add(h.Reset, strconv.FormatInt(c.GetDurationUntilReset().GetSeconds(), 10))
	}
	if over {
		add("retry-after", strconv.FormatInt(max(1, (v.retryMs+999)/1000), 10))
	}
	if len(hs) > 0 {
		resp.ResponseHeadersToAdd = hs
	}
	if s.cfg.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, plan, v.passed)
	}
	return resp
}

// describe fills one limited descriptor's status from its decision.
// left is room for its time left (nil: made).
func (s *Server) describe(st *rlsv3.RateLimitResponse_DescriptorStatus, left *durationpb.Duration, p *planned, h cluster.HitResult, now int64, counted bool, hdr *headerItems, v *verdicts) {
	m := h.MainPart()
	st.CurrentLimit = p.currentLimit()
	st.LimitRemaining = uint32(min(max(m.Remaining, 0), math.MaxUint32))
	// Whole seconds, rounded up: on an epoch-aligned window this is
	// exactly envoyproxy/ratelimit's unit - now % unit.
	st.DurationUntilReset = seconds(left, (max(0, m.ResetAt-now)+999)/1000)
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
func (s *Server) describeCheck(st *rlsv3.RateLimitResponse_DescriptorStatus, p *planned, left *durationpb.Duration) {
	st.CurrentLimit = p.currentLimit()
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
	st.DurationUntilReset = seconds(left, (max(0, reset-now)+999)/1000)
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

// currentLimit is the descriptor's limit as the response states it: the
// tree's, shared (read only), or made for an override's policy.
func (p *planned) currentLimit() *rlsv3.RateLimitResponse_RateLimit {
	if p.limit != nil {
		return p.limit
	}
	return currentLimit(p.pol)
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
// per limited descriptor, written into one buffer each.
type headerItems struct{ pol, rl []byte }

func (h *headerItems) add(p *policy.Policy, m window.Result, now int64) {
	name := p.Name
	if p.Envoy != nil && p.Envoy.Name != "" {
		name = p.Envoy.Name
	}
	if len(h.pol) > 0 {
		h.pol, h.rl = append(h.pol, ", "...), append(h.rl, ", "...)
	}
	h.pol = strconv.AppendQuote(h.pol, name)
	h.pol = strconv.AppendInt(append(h.pol, ";q="...), m.Limit, 10)
	h.pol = strconv.AppendInt(append(h.pol, ";w="...), (m.WindowMs+999)/1000, 10)
	h.rl = strconv.AppendQuote(h.rl, name)
	h.rl = strconv.AppendInt(append(h.rl, ";r="...), max(0, m.Remaining), 10)
	h.rl = strconv.AppendInt(append(h.rl, ";t="...), max(0, (m.ResetAt-now+999)/1000), 10)
}

// headers returns the two headers, with room for extra more (made in
// one allocation).
func (h *headerItems) headers(extra int) []*corev3.HeaderValue {
	n := extra
	if len(h.pol) > 0 {
		n += 2
	}
	if n == 0 {
		return nil
	}
	room := make([]corev3.HeaderValue, n)
	out := make([]*corev3.HeaderValue, 0, n)
	for i := range room {
		out = append(out, &room[i])
	}
	if len(h.pol) == 0 {
		return out[:0]
	}
	room[0].Key, room[0].Value = "ratelimit-policy", string(h.pol)
	room[1].Key, room[1].Value = "ratelimit", string(h.rl)
	return out[:2]
}
