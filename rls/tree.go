package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/policy"
)

// tree is envoyproxy/ratelimit's descriptor tree, rebuilt from the policies
// import-envoy wrote (those with an Envoy match).
type tree struct {
	domains map[string]*node
}

type node struct {
	exact map[policy.EnvoyEntry]*node // key and value
	any   map[string]*node            // key only: any value, one bucket per value
	pol   *policy.Policy
}

func newNode() *node {
	return &node{exact: map[policy.EnvoyEntry]*node{}, any: map[string]*node{}}
}

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
			var next *node
			if d.Value != "" {
				if next = n.exact[d]; next == nil {
					next = newNode()
					n.exact[d] = next
				}
			} else if next = n.any[d.Key]; next == nil {
				next = newNode()
				n.any[d.Key] = next
			}
			n = next
		}
		n.pol = &ps[i]
	}
	return t
}

// match finds the policy for a request's descriptor as envoyproxy/ratelimit
// does: at each level the key with this value wins over the key alone, and
// a limit applies only where the descriptor ends.
func (t *tree) match(domain string, entries []entry) *policy.Policy {
	n := t.domains[domain]
	if n == nil {
		return nil
	}
	for i, e := range entries {
		next := n.exact[policy.EnvoyEntry{Key: e.key, Value: e.value}]
		if next == nil {
			next = n.any[e.key]
		}
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			return next.pol
		}
		n = next
	}
	return nil
}

type entry struct{ key, value string }

// bucket is the client id a descriptor counts under: its entries as
// envoyproxy/ratelimit spells its cache key (key_value joined by '.'), or
// that key's SHA-256 when it is too long or has bytes a client id cannot.
func bucket(entries []entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.key)
		b.WriteByte('_')
		b.WriteString(e.value)
	}
	s := b.String()
	if cluster.ValidateClient(s) != nil {
		sum := sha256.Sum256([]byte(s))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return s
}
