package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/policy"
)

// tree is envoyproxy/ratelimit's descriptor tree, rebuilt from the policies
// import-envoy wrote (those with an Envoy match).
type tree struct {
	domains map[string]*node
}

// node is one descriptor of a configuration. Its children are keyed as
// envoyproxy/ratelimit keys them: "key" for a key alone, "key_value" for a
// key with a value (wildcards included, '*' and all).
type node struct {
	kids map[string]*node
	// wild are the children whose value has a '*', in configuration order:
	// the first that matches wins.
	wild  []wildcard
	entry policy.EnvoyEntry
	pol   *policy.Policy
	// limit is pol's limit as a response states it, made once per tree
	// (responses share it, read only).
	limit *rlsv3.RateLimitResponse_RateLimit
	// metricKey is the metric key of a descriptor ending here whose path
	// names no request value (no detailed_metric, value_to_metric or
	// share_threshold): made once per tree, not per request.
	metricKey string
}

type wildcard struct {
	key   string   // the child's key in kids
	parts []string // key split on '*'
	order int
}

func newNode() *node { return &node{kids: map[string]*node{}} }

func buildTree(ps []policy.Policy) *tree {
	t := &tree{domains: map[string]*node{}}
	for i := range ps {
		e := ps[i].Envoy
		if e == nil || len(e.Descriptors) == 0 {
			continue
		}
		n := t.domains[e.Domain]
		if n == nil {
			n = newNode()
			t.domains[e.Domain] = n
		}
		for _, d := range e.Descriptors {
			k := d.Key
			if d.Value != "" {
				k += "_" + d.Value
			}
			next := n.kids[k]
			if next == nil {
				next = newNode()
				next.entry = d
				n.kids[k] = next
				if strings.Contains(k, "*") {
					n.wild = append(n.wild, wildcard{key: k, parts: strings.Split(k, "*"), order: d.Order})
				}
			}
			n = next
		}
		n.pol = &ps[i]
		n.limit = currentLimit(n.pol)
	}
	for _, n := range t.domains {
		n.sortWild()
		n.staticKeys("")
	}
	return t
}

// staticKeys sets each node's metric key as its configuration path
// spells it (metricKey's result when no request value shows).
func (n *node) staticKeys(parent string) {
	for _, k := range n.kids {
		var b strings.Builder
		if parent != "" {
			b.WriteString(parent)
			b.WriteByte('.')
		}
		b.WriteString(k.entry.Key)
		if k.entry.Value != "" {
			b.WriteString("_" + k.entry.Value)
		}
		k.metricKey = b.String()
		k.staticKeys(k.metricKey)
	}
}

func (n *node) sortWild() {
	slices.SortStableFunc(n.wild, func(a, b wildcard) int { return a.order - b.order })
	for _, k := range n.kids {
		k.sortWild()
	}
}

// match is what a request's descriptor matched.
type match struct {
	pol   *policy.Policy
	limit *rlsv3.RateLimitResponse_RateLimit // pol's, as the tree made it
	// shared[i] is the wildcard value entry i counts under when its
	// descriptor has share_threshold ("" otherwise).
	shared []string
	// metricKey is the descriptor's key in metrics (metric.go).
	metricKey string
}

// match finds the limit for a request's descriptor as envoyproxy/ratelimit
// does: at each level the key with this value first, then the first
// wildcard (in configuration order) that matches key_value, then the key
// alone; a limit applies only where the request's descriptor ends, and a
// descriptor without one (or matching nothing) is not limited.
func (t *tree) match(domain string, entries []entry) match {
	n := t.domains[domain]
	if n == nil {
		return match{}
	}
	var m match
	// The path and each level's key_value are built in room on the stack
	// for the usual descriptor (a few short entries): no allocation.
	var pathBuf [8]*node
	var kvBuf [128]byte
	path := pathBuf[:0]
	named := false // the metric key needs the request's spelling
	for i, e := range entries {
		kvb := append(append(append(kvBuf[:0], e.key...), '_'), e.value...)
		next, wildKey := n.kids[string(kvb)], ""
		if next == nil {
			kv := string(kvb)
			for _, w := range n.wild {
				if wildcardMatch(w.parts, kv) {
					next, wildKey = n.kids[w.key], w.key
					break
				}
			}
		}
		if next == nil {
			next = n.kids[e.key]
		}
		if next == nil {
			break
		}
		path = append(path, next)
		// The tree's spelling holds while the request's key is the
		// configuration's (a wildcard or an underscore can blur them).
		named = named || next.entry.ValueToMetric || next.entry.Key != e.key
		if wildKey != "" && next.entry.ShareThreshold {
			if m.shared == nil {
				m.shared = make([]string, len(entries))
			}
			// As envoyproxy/ratelimit spells it: the pattern less "key_"
			// (the whole pattern when the wildcard is in the key).
			m.shared[i] = strings.TrimPrefix(wildKey, e.key+"_")
		}
		if i == len(entries)-1 && next.pol != nil {
			m.pol, m.limit = next.pol, next.limit
		}
		if len(next.kids) == 0 {
			break
		}
		n = next
	}
	if m.pol == nil || m.pol.Envoy == nil || m.pol.Envoy.NoLimit {
		return match{}
	}
	if !m.pol.Envoy.DetailedMetric && !named && m.shared == nil {
		// The limit ends at the last entry: the path is the whole
		// descriptor, as the tree spelt it.
		m.metricKey = path[len(path)-1].metricKey
		return m
	}
	m.metricKey = metricKey(entries, path, m)
	return m
}

// wildcardMatch reports whether s matches the pattern split on '*' (each
// '*' matches any run of bytes, the empty one included).
func wildcardMatch(parts []string, s string) bool {
	if len(parts) == 1 {
		return parts[0] == s
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	mid := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}

type entry struct{ key, value string }

// bucket is the client id a descriptor counts under: its entries as
// envoyproxy/ratelimit spells its cache key (key_value joined by '.', a
// share_threshold entry spelt with its wildcard so every value matching it
// shares the counter), or that key's SHA-256 when it is too long or has
// bytes a client id cannot.
func bucket(entries []entry, shared []string) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.key)
		b.WriteByte('_')
		if i < len(shared) && shared[i] != "" {
			b.WriteString(shared[i])
		} else {
			b.WriteString(e.value)
		}
	}
	s := b.String()
	if cluster.ValidateClient(s) != nil {
		sum := sha256.Sum256([]byte(s))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return s
}

// metricKey names a matched descriptor in metrics as envoyproxy/ratelimit
// names its stats, less the domain: the configuration's path
// (key_value.key), with the request's value at a level whose descriptor
// has value_to_metric, and the request's values everywhere when the limit
// has detailed_metric; a share_threshold level always shows its wildcard.
func metricKey(entries []entry, path []*node, m match) string {
	detailed := m.pol.Envoy.DetailedMetric
	var b strings.Builder
	for i, e := range entries {
		if !detailed && i >= len(path) {
			break
		}
		if i > 0 {
			b.WriteByte('.')
		}
		v := e.value
		switch {
		case i < len(m.shared) && m.shared[i] != "":
			v = m.shared[i]
		case detailed:
		case path[i].entry.ValueToMetric:
		default:
			v = path[i].entry.Value
		}
		b.WriteString(e.key)
		if v != "" {
			b.WriteString("_" + v)
		}
	}
	return b.String()
}
