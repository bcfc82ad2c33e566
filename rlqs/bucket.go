package rlqs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlnode/rlnode/cluster"
)

// PolicyField is the bucket id entry that names the rlnode policy.
const PolicyField = "policy"

// AllClients is the client of a bucket whose id has no entry but the
// policy: one budget for every request in the bucket.
const AllClients = "all"

// KeyOf maps a bucket id onto an rlnode key, the documented rule:
//
//   - the policy is the id's "policy" entry, else the report's domain;
//   - the client is every other entry, sorted by name, as name=value
//     joined by "&" (AllClients when there is none); one longer than a
//     client id may be is replaced by "sha256:" and its hex digest.
func KeyOf(domain string, id map[string]string) (policyName, client string, err error) {
	policyName = id[PolicyField]
	if policyName == "" {
		policyName = domain
	}
	if policyName == "" {
		return "", "", errors.New("bucket names no policy: give it a \"policy\" entry or set the filter's domain")
	}
	names := make([]string, 0, len(id))
	for k := range id {
		if k != PolicyField {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = k + "=" + id[k]
	}
	client = strings.Join(parts, "&")
	if client == "" {
		client = AllClients
	}
	if cluster.ValidateClient(client) != nil {
		sum := sha256.Sum256([]byte(client))
		client = "sha256:" + hex.EncodeToString(sum[:])
	}
	return policyName, client, nil
}

// bucketKey is a bucket id's stable text, for the stream's map.
func bucketKey(id map[string]string) string {
	names := make([]string, 0, len(id))
	for k := range id {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "%q=%q;", k, id[k])
	}
	return b.String()
}

// farFill is a token bucket's fill interval long enough that no token
// is added within any assignment's life: the bucket holds the granted
// units and no more. Envoy computes the rate from whole seconds.
const farFill = 365 * 24 * time.Hour

// tokenBucket is the assignment of units granted for ttl. seq makes each
// assignment differ from the last (Envoy keeps its old bucket, with what
// is left of it, when an assignment repeats the previous one; a fresh
// bucket holds the fresh grant).
func tokenBucket(id *rlqsv3.BucketId, units int64, ttl time.Duration, seq uint32) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	tokens := uint32(min(units, math.MaxUint32))
	fill := durationpb.New(farFill + time.Duration(seq%1_000_000+1))
	return assignment(id, ttl, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
		TokenBucket: &typev3.TokenBucket{MaxTokens: tokens, TokensPerFill: wrapperspb.UInt32(1), FillInterval: fill}}})
}

// denyAll refuses every request of the bucket for ttl: what a bucket gets
// when its budget is spent or no grant could be made in time.
func denyAll(id *rlqsv3.BucketId, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return assignment(id, ttl, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{
		BlanketRule: typev3.RateLimitStrategy_DENY_ALL}})
}

func assignment(id *rlqsv3.BucketId, ttl time.Duration, s *typev3.RateLimitStrategy) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl), RateLimitStrategy: s}}}
}

// abandon tells Envoy to drop the bucket (it went cold).
func abandon(id *rlqsv3.BucketId) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}
}
