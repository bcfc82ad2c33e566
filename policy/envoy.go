package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
)

// Envoy ties a policy to a descriptor of an envoyproxy/ratelimit
// configuration, so the gRPC rate limit service can rebuild the descriptor
// tree from the replicated policy table.
type Envoy struct {
	Domain string `json:"domain"`
	// Descriptors is the path from the domain to this descriptor; an entry
	// without a value matches any value, one bucket per value; a value with
	// '*' matches as envoyproxy/ratelimit's wildcards do.
	Descriptors []EnvoyEntry `json:"descriptors"`
	// Unit and RequestsPerUnit are the configuration's own words, reported
	// back to Envoy as current_limit.
	Unit            string `json:"unit,omitempty"`
	RequestsPerUnit uint32 `json:"requestsPerUnit,omitempty"`
	// Name is rate_limit.name; Replaces are the names of the limits this
	// one replaces when both match one request (rate_limit.replaces).
	Name     string   `json:"name,omitempty"`
	Replaces []string `json:"replaces,omitempty"`
	// Unlimited: matching requests are never limited (nor counted).
	Unlimited bool `json:"unlimited,omitempty"`
	// NoLimit: the descriptor has no rate_limit and no descriptors under
	// it. It still matches, so it whitelists its value where its key alone
	// has a limit. The policy only marks the match; it is never counted.
	NoLimit bool `json:"noLimit,omitempty"`
	// ShadowMode: counted and reported, never refuses.
	ShadowMode bool `json:"shadowMode,omitempty"`
	// QuotaMode: over the limit refuses the request only when every
	// quota-mode descriptor of it is over (quota_mode).
	QuotaMode bool `json:"quotaMode,omitempty"`
	// DetailedMetric: metrics name the descriptor's values.
	DetailedMetric bool `json:"detailedMetric,omitempty"`
	// Metadata is the descriptor's metadata, returned in the response's
	// dynamic metadata when the request passes.
	Metadata map[string]any `json:"metadata,omitempty"`
}

// EnvoyEntry is one level of a descriptor path, with the flags of the
// configuration's descriptor at that level.
type EnvoyEntry struct {
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
	// ShareThreshold: every value matching this wildcard shares one counter.
	ShareThreshold bool `json:"shareThreshold,omitempty"`
	// ValueToMetric: metrics name the request's value at this level.
	ValueToMetric bool `json:"valueToMetric,omitempty"`
	// Order is the descriptor's position in its domain's configuration
	// (files in order, depth first): the first wildcard in it that matches
	// wins, as in envoyproxy/ratelimit.
	Order int `json:"order,omitempty"`
}

// EnvoyUnits maps envoyproxy/ratelimit's units onto windows (a month is 30
// days and a year 365, as envoyproxy/ratelimit counts them).
var EnvoyUnits = map[string]time.Duration{
	"SECOND": time.Second,
	"MINUTE": time.Minute,
	"HOUR":   time.Hour,
	"DAY":    24 * time.Hour,
	"WEEK":   7 * 24 * time.Hour,
	"MONTH":  30 * 24 * time.Hour,
	"YEAR":   365 * 24 * time.Hour,
}

// EnvoyRule is one descriptor with a rate_limit (or a leaf without one), as
// import-envoy turns it into a policy.
type EnvoyRule struct {
	// Name is the policy name: "envoy:" and envoyproxy/ratelimit's full key
	// (domain.key_value.key), shortened with a hash when it would not fit.
	Name   string
	Window time.Duration
	Limit  int64
	Envoy  Envoy
}

// envoyFullKey spells a descriptor path as envoyproxy/ratelimit does:
// domain.key_value.key.
func envoyFullKey(domain string, path []EnvoyEntry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range path {
		b.WriteString("." + e.Key)
		if e.Value != "" {
			b.WriteString("_" + e.Value)
		}
	}
	return b.String()
}

// EnvoyPolicyName is the policy name import-envoy gives a descriptor:
// "envoy:" + its full key when that is a valid name, else a readable prefix
// and a hash of the full key.
func EnvoyPolicyName(domain string, path []EnvoyEntry) string {
	full := envoyFullKey(domain, path)
	if name := "envoy:" + full; ValidateName(name) == nil {
		return name
	}
	sum := sha256.Sum256([]byte(full))
	clean := []byte(full)
	for i, c := range clean {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.:-", c) >= 0) {
			clean[i] = '-'
		}
	}
	prefix := "envoy:" + string(clean)
	if len(prefix) > MaxNameLen-13 {
		prefix = prefix[:MaxNameLen-13]
	}
	return prefix + "-" + hex.EncodeToString(sum[:])[:12]
}

// EnvoyOverrideName is the policy a request's per-descriptor limit override
// counts against: one per (requests_per_unit, unit).
func EnvoyOverrideName(requestsPerUnit uint32, unit string) string {
	return fmt.Sprintf("%s%d-per-%s", EnvoyOverridePrefix, requestsPerUnit, strings.ToLower(unit))
}

// EnvoyOverridePrefix starts the name of every override policy.
const EnvoyOverridePrefix = "envoy-override:"

// Bounds of an Envoy match (its JSON travels in the log with the policy).
const (
	MaxEnvoyDepth = 16
	MaxEnvoyJSON  = 8 << 10
)

// Equal compares two matches (nil equals nil only).
func (e *Envoy) Equal(o *Envoy) bool {
	if e == nil || o == nil {
		return e == o
	}
	return e.Domain == o.Domain && slices.Equal(e.Descriptors, o.Descriptors) && e.Unit == o.Unit &&
		e.RequestsPerUnit == o.RequestsPerUnit && e.Name == o.Name && slices.Equal(e.Replaces, o.Replaces) &&
		e.Unlimited == o.Unlimited && e.NoLimit == o.NoLimit && e.ShadowMode == o.ShadowMode &&
		e.QuotaMode == o.QuotaMode && e.DetailedMetric == o.DetailedMetric &&
		bytes.Equal(metadataJSON(e.Metadata), metadataJSON(o.Metadata))
}

// metadataJSON is the metadata as the log carries it (sorted keys), nil
// for none.
func metadataJSON(m map[string]any) []byte {
	if len(m) == 0 {
		return nil
	}
	b, _ := json.Marshal(m)
	return b
}

// Validate bounds a match so its JSON always fits in the log.
func (e *Envoy) Validate() error {
	if len(e.Descriptors) > MaxEnvoyDepth {
		return fmt.Errorf("descriptors: %d levels, at most %d", len(e.Descriptors), MaxEnvoyDepth)
	}
	n := len(e.Domain) + len(e.Name) + len(e.Unit)
	for i, d := range e.Descriptors {
		if d.Key == "" {
			return fmt.Errorf("descriptors[%d].key is empty", i)
		}
		n += len(d.Key) + len(d.Value) + 80
	}
	for _, r := range e.Replaces {
		n += len(r) + 4
	}
	if e.Unit != "" {
		if _, ok := EnvoyUnits[e.Unit]; !ok {
			return fmt.Errorf("unit %q unknown", e.Unit)
		}
	}
	if len(e.Metadata) > 0 {
		b, err := json.Marshal(e.Metadata)
		if err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
		n += len(b)
	}
	if n > MaxEnvoyJSON/2 {
		return fmt.Errorf("%d bytes of domain, keys, values, names and metadata: at most %d", n, MaxEnvoyJSON/2)
	}
	return nil
}

// Policy is the replicated policy for the rule: a fixed window of the
// rule's unit, carrying the match. Its windows are aligned to the epoch
// (a minute limit resets on every whole minute, as envoyproxy/ratelimit
// counts) unless anchored is set.
func (r EnvoyRule) Policy(anchored bool) Policy {
	p := Fixed(r.Name, r.Limit, r.Window)
	e := r.Envoy
	p.Envoy = &e
	if !anchored {
		p.Align = AlignEpoch
	}
	return p
}

// envoyFromNode reads a policy's "envoy" field as a decoded YAML node.
func envoyFromNode(field string, node any) (*Envoy, error) {
	if node == nil {
		return nil, nil
	}
	b, err := yaml.Marshal(node)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	var e Envoy
	if err := yaml.UnmarshalWithOptions(b, &e, yaml.Strict()); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return &e, nil
}
