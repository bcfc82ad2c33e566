package checker

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Algorithms, spelled as rlnode's policy API spells them.
const (
	FixedWindow   = "fixed_window"
	SlidingWindow = "sliding_window"
	TokenBucket   = "token_bucket"
)

// AlignEpoch is Policy.Align for fixed windows aligned to the epoch
// (windows at multiples of the window length since the Unix epoch).
const AlignEpoch = "epoch"

// DefaultPolicy is the policy of ops that name none (GET /check/:client).
const DefaultPolicy = "default"

// maxLimits is the most limits one policy may have in the checker (rlnode
// allows 8; the token bucket model keeps one arrival time per limit).
const maxLimits = 4

// Limit is one limit of a policy, as in PUT /v1/policies/:name.
type Limit struct {
	Limit    int64 `json:"limit"`
	WindowMs int64 `json:"windowMs"`
	Burst    int64 `json:"burst,omitempty"` // token bucket capacity; 0 = Limit
}

// capacity is what rlnode reports as the limit: the burst of a token
// bucket, the limit otherwise.
func (l Limit) capacity(alg string) int64 {
	if alg == TokenBucket && l.Burst > 0 {
		return l.Burst
	}
	return l.Limit
}

// Policy is one policy over a run: its algorithm and every set of limits it
// had, oldest first. A run may only raise limits (the nemesis never lowers
// one) and never changes a window, so each version allows at least as much
// as the one before. Every answer names the limits that decided it, which
// tells the checker the version each definite op saw.
type Policy struct {
	Algorithm string    `json:"algorithm"`
	Versions  [][]Limit `json:"versions"`
	// Align is "" (anchored at each key's first hit) or AlignEpoch.
	Align string `json:"align,omitempty"`
	// Leased: consistency leased. Its keys are checked for never over the
	// limit (leased.go), not for linearizability.
	Leased bool `json:"leased,omitempty"`
}

// NewPolicy is a policy that never changes.
func NewPolicy(alg string, limits ...Limit) Policy {
	return Policy{Algorithm: alg, Versions: [][]Limit{limits}}
}

// Raised returns the policy with one more version.
func (p Policy) Raised(limits ...Limit) Policy {
	p.Versions = append(slices.Clone(p.Versions), limits)
	return p
}

func (p Policy) validate(name string) error {
	if p.Algorithm != FixedWindow && p.Algorithm != SlidingWindow && p.Algorithm != TokenBucket {
		return fmt.Errorf("policy %q: unknown algorithm %q", name, p.Algorithm)
	}
	if p.Align != "" && (p.Align != AlignEpoch || p.Algorithm != FixedWindow) {
		return fmt.Errorf("policy %q: align %q: the checker models epoch-aligned fixed windows only", name, p.Align)
	}
	if len(p.Versions) == 0 || len(p.Versions) > 100 {
		return fmt.Errorf("policy %q: want 1 to 100 versions, got %d", name, len(p.Versions))
	}
	first := p.Versions[0]
	n := len(first)
	if n == 0 || n > maxLimits || (p.Algorithm != TokenBucket && n != 1) {
		return fmt.Errorf("policy %q: %d limits; the checker models one limit per %s and up to %d per %s",
			name, n, p.Algorithm, maxLimits, TokenBucket)
	}
	for v, limits := range p.Versions {
		if len(limits) != n {
			return fmt.Errorf("policy %q version %d: %d limits, version 0 has %d", name, v, len(limits), n)
		}
		for i, l := range limits {
			if err := l.validate(p.Algorithm); err != nil {
				return fmt.Errorf("policy %q version %d limit %d: %w", name, v, i, err)
			}
			if l.WindowMs != first[i].WindowMs {
				return fmt.Errorf("policy %q version %d limit %d: window changed (%dms, was %dms)", name, v, i, l.WindowMs, first[i].WindowMs)
			}
			if v == 0 {
				continue
			}
			prev := p.Versions[v-1][i]
			if l.Limit < prev.Limit || l.capacity(p.Algorithm) <= prev.capacity(p.Algorithm) {
				return fmt.Errorf("policy %q version %d limit %d: limits may only be raised, and the reported limit must grow so answers tell the versions apart", name, v, i)
			}
		}
	}
	return nil
}

func (l Limit) validate(alg string) error {
	const maxWindow = 366 * 24 * 3600 * 1000
	if l.Limit < 1 || l.Limit > 1<<20 || l.Burst < 0 || l.Burst > 1<<20 {
		return fmt.Errorf("limit %d burst %d: want 1 to 2^20", l.Limit, l.Burst)
	}
	if l.WindowMs < 1 || l.WindowMs > maxWindow {
		return fmt.Errorf("window %dms: want 1ms to 366 days", l.WindowMs)
	}
	if alg == TokenBucket && l.WindowMs%l.Limit != 0 {
		// Refills then land on whole milliseconds, so an answer's
		// resetAt is the bucket's exact arrival time and the model
		// stays exact without rounding. Pick limits accordingly.
		return fmt.Errorf("token bucket %d per %dms: the checker needs the refill interval (window/limit) to be a whole number of ms", l.Limit, l.WindowMs)
	}
	return nil
}

// policies returns the policy table the checker judges against: cfg's,
// plus the legacy default (fixed window, Limit per WindowMs) unless cfg
// names its own default.
func (cfg Config) policies() (map[string]Policy, error) {
	out := maps.Clone(cfg.Policies)
	if out == nil {
		out = map[string]Policy{}
	}
	if _, ok := out[DefaultPolicy]; !ok && (cfg.Limit != 0 || cfg.WindowMs != 0 || len(out) == 0) {
		if cfg.Limit <= 0 {
			return nil, fmt.Errorf("limit must be positive, got %d", cfg.Limit)
		}
		if cfg.WindowMs <= 0 {
			return nil, fmt.Errorf("window must be positive, got %dms", cfg.WindowMs)
		}
		out[DefaultPolicy] = NewPolicy(FixedWindow, Limit{Limit: cfg.Limit, WindowMs: cfg.WindowMs})
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(out)) {
		if err := out[name].validate(name); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// version returns the index of the version whose limits an answer reports,
// or -1. An answer without per-limit detail (the legacy GET /check/:client
// body) is read as the first version.
func (p Policy) version(reported []LimitResult) int {
	if len(reported) == 0 {
		if len(p.Versions) == 1 {
			return 0
		}
		return -1
	}
	for v, limits := range p.Versions {
		if len(limits) != len(reported) {
			continue
		}
		match := true
		for i, l := range limits {
			r := reported[i]
			if r.Limit != l.capacity(p.Algorithm) || (r.WindowMs != 0 && r.WindowMs != l.WindowMs) {
				match = false
				break
			}
		}
		if match {
			return v
		}
	}
	return -1
}
