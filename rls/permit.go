package rls

import (
	"context"
	"errors"
	"math"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlnode/rlnode/cluster"
)

// PermitOwner is the owner of the permits the service takes: releases come
// as is_negative_hits descriptors, which name no permit, so they give back
// the key's oldest permit, whoever took it.
const PermitOwner = "rls"

// releasePermits gives back, before anything is decided, the oldest permit
// of each is_negative_hits descriptor's key (none live: nothing to do).
func (s *Server) releasePermits(dl *deadline, plan []planned) error {
	for _, p := range plan {
		if !p.release {
			continue
		}
		if _, err := s.cfg.Permits.ReleaseOldestPermit(dl.context(), p.hit.Policy, p.hit.Client); err != nil && !errors.Is(err, cluster.ErrNotFound) {
			return status.Errorf(codes.Unavailable, "release a permit: %v", err)
		}
	}
	return nil
}

// takePermits takes a permit for each concurrency descriptor, in order,
// and reports whether every one was taken; when one is refused, those
// taken are given back at once.
func (s *Server) takePermits(dl *deadline, plan []planned) (bool, error) {
	for i := range plan {
		p := &plan[i]
		if !p.permit {
			continue
		}
		pm, err := s.cfg.Permits.AcquirePermit(dl.context(), cluster.PermitRequest{Policy: p.hit.Policy, Client: p.hit.Client, Owner: PermitOwner, TTL: s.cfg.PermitTTL})
		if err != nil {
			s.givePermitsBack(plan)
			return false, status.Errorf(codes.Unavailable, "take a permit: %v", err)
		}
		p.permitOf, p.permitted = pm, pm.Acquired
		if !pm.Acquired {
			s.givePermitsBack(plan)
			return false, nil
		}
	}
	return true, nil
}

// givePermitsBack releases the permits this request took (the request is
// refused or failed); a release that fails leaves the permit to its TTL.
func (s *Server) givePermitsBack(plan []planned) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	defer cancel()
	for i := range plan {
		if p := &plan[i]; p.permitted {
			if _, err := s.cfg.Permits.ReleasePermit(ctx, p.permitOf.ID, PermitOwner); err == nil {
				p.permitted = false
			}
		}
	}
}

// describePermit fills a concurrency descriptor's status: the permits live
// against the limit, and when refused, the time until the earliest ends.
func (s *Server) describePermit(st *rlsv3.RateLimitResponse_DescriptorStatus, p *planned, v *verdicts) {
	pm := p.permitOf
	st.CurrentLimit = currentLimit(p.pol)
	st.CurrentLimit.RequestsPerUnit = uint32(min(pm.Limit, math.MaxUint32))
	st.LimitRemaining = uint32(min(max(pm.Limit-pm.Live, 0), math.MaxUint32))
	if pm.Acquired {
		s.observe(p.domain, "ok")
		v.closer(st)
		return
	}
	wait := max(pm.RetryAt-pm.Now, 1)
	st.DurationUntilReset = durationpb.New(time.Duration((wait+999)/1000) * time.Second)
	st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	st.LimitRemaining = 0
	s.observe(p.domain, "over_limit")
	v.over++
	v.closest = st
	v.retryMs = max(v.retryMs, wait)
}
