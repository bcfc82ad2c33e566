package rls

import (
	"fmt"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/metrics"
	"github.com/rlnode/rlnode/window"
)

// nearNum/nearDen is envoyproxy/ratelimit's default NEAR_LIMIT_RATIO, 0.8:
// a hit is near the limit past 4/5 of it.
const nearNum, nearDen = 4, 5

// limitStats counts one decided hit of cost on a limit that had used
// before it.
func limitStats(limit, used, cost int64, allowed, shadow bool) metrics.RLSLimitStats {
	st := metrics.RLSLimitStats{TotalHits: uint64(cost)}
	near := limit * nearNum / nearDen
	after := used + cost
	if allowed {
		st.WithinLimit = uint64(cost)
		if after > near {
			st.NearLimit = uint64(min(cost, after-near))
		}
		return st
	}
	if used >= limit {
		st.OverLimit = uint64(cost)
	} else {
		st.OverLimit = uint64(after - limit)
		st.NearLimit = uint64(limit - max(near, used))
	}
	if shadow {
		st.ShadowMode = st.OverLimit
	}
	return st
}

// count hands one limited descriptor's counters to the observer.
func (s *Server) count(p *planned, h cluster.HitResult, m window.Result, counted bool) {
	if s.cfg.Observer == nil {
		return
	}
	allowed := h.Outcome == window.Allowed && !h.WouldRefuse()
	used := m.Limit - m.Remaining // what the window held before this hit
	if allowed && counted {
		used -= p.hit.Cost
	}
	s.cfg.Observer.RLSLimit(p.domain, p.metric, limitStats(m.Limit, max(0, used), p.hit.Cost, allowed, p.shadow))
}

// overrideMetricKey names a descriptor with a limit override in metrics:
// its keys only, since its values are the caller's.
func overrideMetricKey(entries []entry) string {
	keys := make([]string, len(entries))
	for i, e := range entries {
		keys[i] = e.key
	}
	return "override:" + strings.Join(keys, ".")
}

// dynamicMetadata is the response's dynamic metadata as
// envoyproxy/ratelimit writes it (RESPONSE_DYNAMIC_METADATA): the domain,
// the request's descriptors, hits_addend, and the merged metadata of the
// descriptors that were not over their limit.
func dynamicMetadata(req *rlsv3.RateLimitRequest, plan []planned, passed []int) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	var descs []*structpb.Value
	for _, d := range req.GetDescriptors() {
		var es []*structpb.Value
		for _, e := range d.GetEntries() {
			es = append(es, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		df := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: es})}
		if d.GetLimit() != nil {
			df["limit"] = structpb.NewStringValue(fmt.Sprint(d.GetLimit()))
		}
		if h := d.GetHitsAddend(); h != nil {
			df["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: df}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	merged := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, i := range passed {
		if p := plan[i].pol; p != nil && p.Envoy != nil && len(p.Envoy.Metadata) > 0 {
			if md, err := structpb.NewStruct(p.Envoy.Metadata); err == nil {
				mergeStruct(merged, md)
			}
		}
	}
	if len(merged.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeStruct adds src's fields to dst: a field dst has already stays,
// except that two structs merge field by field.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		d, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = v
			continue
		}
		if ds, ss := d.GetStructValue(), v.GetStructValue(); ds != nil && ss != nil {
			mergeStruct(ds, ss)
		}
	}
}
