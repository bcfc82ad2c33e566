package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// runPolicy is one policy the run creates through the HTTP API, with every
// set of limits it has had (the raise-limit nemesis only ever raises).
type runPolicy struct {
	name      string
	algorithm string
	align     string // "" or checker.AlignEpoch
	// leased: consistency leased (nodes decide hot keys from grants; the
	// checker verifies never over the limit, not linearizability).
	leased   bool
	versions [][]checker.Limit
}

func (p *runPolicy) current() []checker.Limit { return p.versions[len(p.versions)-1] }

// body is the PUT /v1/policies/:name request for limits.
func (p *runPolicy) body(limits []checker.Limit) map[string]any {
	var ls []map[string]any
	for _, l := range limits {
		m := map[string]any{"limit": l.Limit, "window": (time.Duration(l.WindowMs) * time.Millisecond).String()}
		if l.Burst > 0 {
			m["burst"] = l.Burst
		}
		ls = append(ls, m)
	}
	b := map[string]any{"algorithm": p.algorithm, "limits": ls}
	if p.align != "" {
		b["align"] = p.align
	}
	if p.leased {
		b["consistency"] = "leased"
	}
	return b
}

// raised returns the next version of p's limits: a fixed or sliding
// window's limit goes up by 2; a token bucket's rate goes up to the next
// rate whose refill interval is whole milliseconds (what the checker's
// model needs) and its burst by one.
func (p *runPolicy) raised() []checker.Limit {
	next := slices.Clone(p.current())
	for i, l := range next {
		switch p.algorithm {
		case checker.TokenBucket:
			n := l.Limit + 1
			for l.WindowMs%n != 0 {
				n++
			}
			next[i].Limit = n
			if l.Burst > 0 {
				next[i].Burst = l.Burst + 1
			}
		default:
			next[i].Limit += 2
		}
	}
	return next
}

// policySet is the run's policy table, shared by the nemesis (which raises
// limits) and the checker (which judges against every version).
type policySet struct {
	mu   sync.Mutex
	pols []*runPolicy
}

// newPolicySet lays out the default run's policies: fixed windows (anchored,
// and aligned to the epoch) and a sliding window of limit per window, and
// a token bucket with two limits
// (a short one with a small burst, a long one that bounds the sustained
// rate), so that both of its limits refuse now and then; then, with
// leased, a leased policy of each algorithm beside them.
func newPolicySet(limit int64, window time.Duration, leased bool) *policySet {
	w := window.Milliseconds()
	ps := &policySet{pols: []*runPolicy{
		{name: "jl-fixed", algorithm: checker.FixedWindow, versions: [][]checker.Limit{{{Limit: limit, WindowMs: w}}}},
		{name: "jl-sliding", algorithm: checker.SlidingWindow, versions: [][]checker.Limit{{{Limit: limit, WindowMs: w}}}},
		{name: "jl-bucket", algorithm: checker.TokenBucket, versions: [][]checker.Limit{{
			{Limit: 4, WindowMs: 1000, Burst: 2},    // a token every 250ms, 2 at once
			{Limit: 20, WindowMs: 10000, Burst: 10}, // a token every 500ms, 10 at once
		}}},
		{name: "jl-fixed-epoch", algorithm: checker.FixedWindow, align: checker.AlignEpoch, versions: [][]checker.Limit{{{Limit: limit, WindowMs: w}}}},
	}}
	if leased {
		ps.pols = append(ps.pols,
			&runPolicy{name: "jl-lfixed", algorithm: checker.FixedWindow, leased: true, versions: [][]checker.Limit{{{Limit: limit, WindowMs: w}}}},
			&runPolicy{name: "jl-lsliding", algorithm: checker.SlidingWindow, leased: true, versions: [][]checker.Limit{{{Limit: limit, WindowMs: w}}}},
			&runPolicy{name: "jl-lbucket", algorithm: checker.TokenBucket, leased: true, versions: [][]checker.Limit{{{Limit: 4, WindowMs: 1000, Burst: 2}}}},
		)
	}
	return ps
}

func (ps *policySet) names() []string {
	var out []string
	for _, p := range ps.pols {
		out = append(out, p.name)
	}
	return out
}

// checkerPolicies is the table the checker judges against.
func (ps *policySet) checkerPolicies() map[string]checker.Policy {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := map[string]checker.Policy{}
	for _, p := range ps.pols {
		cp := checker.Policy{Algorithm: p.algorithm, Align: p.align, Leased: p.leased}
		for _, v := range p.versions {
			cp.Versions = append(cp.Versions, slices.Clone(v))
		}
		out[p.name] = cp
	}
	return out
}

// describe is one line per policy for the log.
func (ps *policySet) describe() string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var parts []string
	for _, p := range ps.pols {
		var ls []string
		for _, l := range p.current() {
			s := fmt.Sprintf("%d/%s", l.Limit, time.Duration(l.WindowMs)*time.Millisecond)
			if l.Burst > 0 {
				s += fmt.Sprintf(" burst %d", l.Burst)
			}
			ls = append(ls, s)
		}
		alg := p.algorithm
		if p.align != "" {
			alg += " align " + p.align
		}
		if p.leased {
			alg += " leased"
		}
		parts = append(parts, fmt.Sprintf("%s %s %s", p.name, alg, strings.Join(ls, " + ")))
	}
	return strings.Join(parts, "; ")
}

// create PUTs every policy on the cluster (through any node; followers
// forward to the leader), retrying while a leader settles.
func (ps *policySet) create(ctx context.Context, adm *admin, urls []string) error {
	for _, p := range ps.pols {
		if err := putPolicy(ctx, adm, urls, p.name, p.body(p.current())); err != nil {
			return err
		}
	}
	return nil
}

// raise adds a raised version of every policy and PUTs it. The version is
// recorded before the PUT: a PUT whose answer is lost may still have been
// applied, and a version no answer ever reports costs the checker
// nothing.
func (ps *policySet) raise(ctx context.Context, adm *admin, urls []string) (string, error) {
	var done []string
	var errs []error
	for _, p := range ps.pols {
		next := p.raised()
		ps.mu.Lock()
		p.versions = append(p.versions, next)
		ps.mu.Unlock()
		if err := putPolicy(ctx, adm, urls, p.name, p.body(next)); err != nil {
			errs = append(errs, err)
			continue
		}
		var ls []string
		for _, l := range next {
			ls = append(ls, fmt.Sprint(l.Limit))
		}
		done = append(done, p.name+" -> "+strings.Join(ls, "+"))
	}
	return strings.Join(done, ", "), errors.Join(errs...)
}

func putPolicy(ctx context.Context, adm *admin, urls []string, name string, body map[string]any) error {
	err := retry(ctx, 15*time.Second, func() error {
		var errs []error
		for _, u := range urls {
			err := adm.do(ctx, 3*time.Second, http.MethodPut, u+"/v1/policies/"+name, body, nil)
			if err == nil {
				return nil
			}
			if isAPIError(err, "invalid_request") {
				return retryStop(err) // our own bad request: retrying will not help
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return fmt.Errorf("put policy %s: %w", name, err)
	}
	return nil
}

// target is one rate-limited key of the workload.
type target struct {
	policy string // "" = the default policy (GET /check/:client)
	client string
	key    string // the checker's key: policy/client, or client alone
	fixed  bool   // a fixed window: peeks are checked only for these
	leased bool   // a leased policy's key: application holders decide it in-process
	warm   bool   // one of the warm keys: picked by a Zipf law, most of them a few hits a second
}

// targets spreads n keys over the strict policies, round robin, and pairs
// them for multi-key checks: keys 0 and 1, 2 and 3, ... (a pair never
// shares a key with another pair, so the checker's groups stay two keys
// wide); then one key per leased policy, never paired (the checker models
// leased keys alone). Without policies every key is in the default policy
// and nothing is paired.
//
// warm more leased keys follow, round robin over the leased policies,
// never paired: the workload picks among them by a Zipf law (s = 1.07), so
// a few are hot and the rest warm (a few hits a second), the keys a node
// leases only when its commit path is busy.
func targets(n int, policies []string, algorithms []string, leased []bool, warm int) ([]target, [][2]int) {
	var strict, lease []int
	for i := range policies {
		if len(leased) > i && leased[i] {
			lease = append(lease, i)
		} else {
			strict = append(strict, i)
		}
	}
	var ts []target
	for i := range n {
		c := fmt.Sprintf("k%d", i)
		if len(strict) == 0 {
			ts = append(ts, target{client: c, key: c, fixed: true})
			continue
		}
		j := strict[i%len(strict)]
		p := policies[j]
		ts = append(ts, target{policy: p, client: c, key: p + "/" + c, fixed: algorithms[j] == checker.FixedWindow})
	}
	var pairs [][2]int
	for i := 0; len(strict) > 0 && i+1 < n; i += 2 {
		pairs = append(pairs, [2]int{i, i + 1})
	}
	for k, j := range lease {
		c := fmt.Sprintf("l%d", k)
		// fixed: false keeps peeks off leased keys (they claim nothing).
		ts = append(ts, target{policy: policies[j], client: c, key: policies[j] + "/" + c, leased: true})
	}
	for i := 0; len(lease) > 0 && i < warm; i++ {
		j := lease[i%len(lease)]
		c := fmt.Sprintf("w%d", i)
		ts = append(ts, target{policy: policies[j], client: c, key: policies[j] + "/" + c, leased: true, warm: true})
	}
	return ts, pairs
}

func (ps *policySet) leasedFlags() []bool {
	var out []bool
	for _, p := range ps.pols {
		out = append(out, p.leased)
	}
	return out
}

func (ps *policySet) algorithms() []string {
	var out []string
	for _, p := range ps.pols {
		out = append(out, p.algorithm)
	}
	return out
}
