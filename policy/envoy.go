package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
	// without a value matches any value, one bucket per value.
	Descriptors []EnvoyEntry `json:"descriptors"`
	// Unit and RequestsPerUnit are the configuration's own words, reported
	// back to Envoy as current_limit.
	Unit            string `json:"unit,omitempty"`
	RequestsPerUnit uint32 `json:"requestsPerUnit,omitempty"`
	// Name is rate_limit.name.
	Name string `json:"name,omitempty"`
	// Unlimited: matching requests are never limited (nor counted).
	Unlimited bool `json:"unlimited,omitempty"`
	// ShadowMode: counted and reported, never refuses.
	ShadowMode bool `json:"shadowMode,omitempty"`
	// DetailedMetric: metrics name the descriptor's values.
	DetailedMetric bool `json:"detailedMetric,omitempty"`
}

// EnvoyEntry is one level of a descriptor path.
type EnvoyEntry struct {
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
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

// EnvoyRule is one descriptor with a rate_limit, as import-envoy turns it
// into a policy.
type EnvoyRule struct {
	// Name is the policy name: "envoy:" and envoyproxy/ratelimit's full key
	// (domain.key_value.key), shortened with a hash when it would not fit.
	Name   string
	Window time.Duration
	Limit  int64
	Envoy  Envoy
}

type envoyFile struct {
	Domain      string            `yaml:"domain"`
	Descriptors []envoyDescriptor `yaml:"descriptors"`
}

type envoyDescriptor struct {
	Key            string            `yaml:"key"`
	Value          string            `yaml:"value"`
	RateLimit      *envoyRateLimit   `yaml:"rate_limit"`
	Descriptors    []envoyDescriptor `yaml:"descriptors"`
	ShadowMode     bool              `yaml:"shadow_mode"`
	DetailedMetric bool              `yaml:"detailed_metric"`
}

type envoyRateLimit struct {
	Unit            string `yaml:"unit"`
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
}

// ParseEnvoy reads one envoyproxy/ratelimit configuration file (domain,
// nested descriptors with key, optional value, rate_limit {unit,
// requests_per_unit, unlimited, name}, shadow_mode, detailed_metric) and
// returns its domain and one rule per descriptor that has a rate_limit.
// Unknown fields, duplicate descriptors and bad units are errors naming
// the descriptor.
func ParseEnvoy(data []byte) (string, []EnvoyRule, error) {
	if err := checkYAML(data, MaxDocumentBytes); err != nil {
		return "", nil, err
	}
	var f envoyFile
	if err := yaml.NewDecoder(bytes.NewReader(data), yaml.Strict()).Decode(&f); err != nil {
		return "", nil, fmt.Errorf("not an envoyproxy/ratelimit configuration: %w", err)
	}
	if f.Domain == "" {
		return "", nil, errors.New("domain is empty")
	}
	var rules []EnvoyRule
	if err := walkEnvoy(f.Domain, nil, f.Descriptors, &rules); err != nil {
		return "", nil, err
	}
	return f.Domain, rules, nil
}

func walkEnvoy(domain string, parent []EnvoyEntry, ds []envoyDescriptor, out *[]EnvoyRule) error {
	seen := map[EnvoyEntry]bool{}
	for _, d := range ds {
		e := EnvoyEntry{Key: d.Key, Value: d.Value}
		path := append(append([]EnvoyEntry(nil), parent...), e)
		where := envoyFullKey(domain, path)
		if d.Key == "" {
			return fmt.Errorf("%s: descriptor has an empty key", where)
		}
		if seen[e] {
			return fmt.Errorf("%s: duplicate descriptor", where)
		}
		seen[e] = true
		if strings.HasSuffix(d.Value, "*") {
			return fmt.Errorf("%s: wildcard values are not supported", where)
		}
		if rl := d.RateLimit; rl != nil {
			r, err := envoyRule(domain, path, d, rl)
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			*out = append(*out, r)
		}
		if err := walkEnvoy(domain, path, d.Descriptors, out); err != nil {
			return err
		}
	}
	return nil
}

func envoyRule(domain string, path []EnvoyEntry, d envoyDescriptor, rl *envoyRateLimit) (EnvoyRule, error) {
	if len(rl.Replaces) > 0 {
		return EnvoyRule{}, errors.New("rate_limit.replaces is not supported")
	}
	unit := strings.ToUpper(rl.Unit)
	w, ok := EnvoyUnits[unit]
	r := EnvoyRule{Name: EnvoyPolicyName(domain, path), Window: w, Limit: int64(rl.RequestsPerUnit),
		Envoy: Envoy{Domain: domain, Descriptors: path, Unit: unit, RequestsPerUnit: rl.RequestsPerUnit, Name: rl.Name,
			Unlimited: rl.Unlimited, ShadowMode: d.ShadowMode, DetailedMetric: d.DetailedMetric}}
	switch {
	case rl.Unlimited && rl.Unit != "":
		return EnvoyRule{}, errors.New("rate_limit: unlimited takes no unit")
	case rl.Unlimited:
		// Never counted; the policy only marks the match. Its limit is
		// the largest there is, should anyone check it by name.
		r.Window, r.Limit, r.Envoy.Unit = time.Second, MaxLimit, ""
	case !ok:
		return EnvoyRule{}, fmt.Errorf("rate_limit.unit %q: want second, minute, hour, day, week, month or year", rl.Unit)
	case rl.RequestsPerUnit == 0:
		return EnvoyRule{}, errors.New("rate_limit.requests_per_unit must be at least 1")
	}
	return r, nil
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
		e.RequestsPerUnit == o.RequestsPerUnit && e.Name == o.Name && e.Unlimited == o.Unlimited &&
		e.ShadowMode == o.ShadowMode && e.DetailedMetric == o.DetailedMetric
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
		n += len(d.Key) + len(d.Value) + 32
	}
	if e.Unit != "" {
		if _, ok := EnvoyUnits[e.Unit]; !ok {
			return fmt.Errorf("unit %q unknown", e.Unit)
		}
	}
	if n > MaxEnvoyJSON/2 {
		return fmt.Errorf("%d bytes of domain, keys and values: at most %d", n, MaxEnvoyJSON/2)
	}
	return nil
}

// Policy is the replicated policy for the rule: a fixed window of the
// rule's unit, carrying the match.
func (r EnvoyRule) Policy() Policy {
	p := Fixed(r.Name, r.Limit, r.Window)
	e := r.Envoy
	p.Envoy = &e
	return p
}

// ReadEnvoyFiles reads envoyproxy/ratelimit configuration files into
// policies; two files may not configure the same domain.
func ReadEnvoyFiles(paths ...string) (domains []string, ps []Policy, err error) {
	seen := map[string]string{}
	for _, path := range paths {
		b, err := readBounded(path)
		if err != nil {
			return nil, nil, err
		}
		domain, rules, err := ParseEnvoy(b)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		if other, dup := seen[domain]; dup {
			return nil, nil, fmt.Errorf("%s: domain %q is already configured by %s", path, domain, other)
		}
		seen[domain] = path
		domains = append(domains, domain)
		for _, r := range rules {
			p := r.Policy()
			if err := p.Validate(); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", path, err)
			}
			ps = append(ps, p)
		}
		if len(ps) > MaxPolicies {
			return nil, nil, fmt.Errorf("%s: the files make more than %d policies, the most the table holds", path, MaxPolicies)
		}
	}
	return domains, ps, nil
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
