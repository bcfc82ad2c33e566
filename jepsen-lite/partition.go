package main

import (
	"fmt"
	"slices"
	"strings"
)

// grudge says, for each node index, which other node indexes it must not
// be able to reach. It is always symmetric: a one-way cut would test
// something else (asymmetric links), which this runner does not claim to.
type grudge map[int][]int

// cutPairs turns a list of unordered node pairs into a symmetric grudge.
func cutPairs(pairs [][2]int) grudge {
	g := grudge{}
	for _, p := range pairs {
		a, b := p[0], p[1]
		if a == b {
			continue
		}
		if !slices.Contains(g[a], b) {
			g[a] = append(g[a], b)
		}
		if !slices.Contains(g[b], a) {
			g[b] = append(g[b], a)
		}
	}
	for k := range g {
		slices.Sort(g[k])
	}
	return g
}

// splitGroups cuts every link between nodes of different groups; nodes in
// the same group keep talking.
func splitGroups(groups ...[]int) grudge {
	var pairs [][2]int
	for i := range groups {
		for j := i + 1; j < len(groups); j++ {
			for _, a := range groups[i] {
				for _, b := range groups[j] {
					pairs = append(pairs, [2]int{a, b})
				}
			}
		}
	}
	return cutPairs(pairs)
}

// isolate cuts node x off from the other n-1 nodes.
func isolate(n, x int) grudge {
	var rest []int
	for i := range n {
		if i != x {
			rest = append(rest, i)
		}
	}
	return splitGroups([]int{x}, rest)
}

// halves splits a node permutation into a minority (the first n/2 nodes)
// and a majority (the rest): the majority side can elect a leader, the
// minority cannot.
func halves(perm []int) (minority, majority []int) {
	k := len(perm) / 2
	return slices.Clone(perm[:k]), slices.Clone(perm[k:])
}

// majoritiesRing arranges the nodes in a ring (in perm order) and lets each
// node reach only its ring neighbours within distance d, where d is the
// smallest distance that gives every node a majority (itself included).
// Every node then sees a majority, but no two adjacent nodes see the same
// one, which is the Jepsen "majorities ring": several nodes may believe they
// can lead. It needs at least 5 nodes; with 3 the ring is a full mesh and
// nothing would be cut, so it returns an error rather than a no-op fault.
func majoritiesRing(perm []int) (grudge, error) {
	n := len(perm)
	maj := n/2 + 1
	d := maj / 2 // the smallest d with 2d+1 >= maj
	if 2*d+1 >= n {
		return nil, fmt.Errorf("majorities ring needs at least 5 nodes, have %d", n)
	}
	var pairs [][2]int
	for i := range n {
		for j := i + 1; j < n; j++ {
			dist := min(j-i, n-(j-i))
			if dist > d {
				pairs = append(pairs, [2]int{perm[i], perm[j]})
			}
		}
	}
	return cutPairs(pairs), nil
}

// bridgeSplit makes two halves that cannot talk to each other and one
// bridge node (perm's middle element) that talks to both. Each half plus the
// bridge is a majority, so the bridge decides which side leads. It needs at
// least 5 nodes: with 3 each half would be one node and "bridge" would just
// be a line.
func bridgeSplit(perm []int) (grudge, int, error) {
	n := len(perm)
	if n < 5 {
		return nil, 0, fmt.Errorf("bridge partition needs at least 5 nodes, have %d", n)
	}
	k := (n - 1) / 2
	left, bridge, right := perm[:k], perm[k], perm[k+1:]
	return splitGroups(left, right), bridge, nil
}

// reachable returns, for node i, the nodes it can still reach under g
// (itself included): what the node "sees" during the partition.
func (g grudge) reachable(n, i int) []int {
	var out []int
	for j := range n {
		if j == i || !slices.Contains(g[i], j) {
			out = append(out, j)
		}
	}
	return out
}

// describe renders g with node names, one "a-x-b" per cut link, for logs.
func (g grudge) describe(names []string) string {
	var cuts []string
	for a := range names {
		for _, b := range g[a] {
			if a < b {
				cuts = append(cuts, names[a]+"-x-"+names[b])
			}
		}
	}
	if len(cuts) == 0 {
		return "no links cut"
	}
	return "cut " + strings.Join(cuts, " ")
}

// groupNames renders node index groups as "{n1 n3} | {n2}" for logs.
func groupNames(names []string, groups ...[]int) string {
	parts := make([]string, len(groups))
	for i, grp := range groups {
		s := make([]string, len(grp))
		for j, x := range grp {
			s[j] = names[x]
		}
		parts[i] = "{" + strings.Join(s, " ") + "}"
	}
	return strings.Join(parts, " | ")
}
