package main

import (
	"slices"
	"testing"
)

// symmetric checks the invariant every grudge must keep: a cut link is cut
// both ways, and nobody is cut from itself.
func symmetric(t *testing.T, g grudge) {
	t.Helper()
	for a, bs := range g {
		for _, b := range bs {
			if a == b {
				t.Errorf("node %d cut from itself", a)
			}
			if !slices.Contains(g[b], a) {
				t.Errorf("%d cannot reach %d, but %d can reach %d", a, b, b, a)
			}
		}
	}
}

func TestIsolate(t *testing.T) {
	for _, n := range []int{3, 5} {
		for x := range n {
			g := isolate(n, x)
			symmetric(t, g)
			if got := g.reachable(n, x); !slices.Equal(got, []int{x}) {
				t.Errorf("n=%d: isolated %d reaches %v", n, x, got)
			}
			for i := range n {
				if i != x && len(g.reachable(n, i)) != n-1 {
					t.Errorf("n=%d: %d reaches %v, want everyone but %d", n, i, g.reachable(n, i), x)
				}
			}
		}
	}
}

func TestHalvesAreMinorityAndMajority(t *testing.T) {
	for _, perm := range [][]int{{2, 0, 1}, {4, 1, 3, 0, 2}} {
		n := len(perm)
		minority, majority := halves(perm)
		if len(minority) != n/2 || len(majority) != n-n/2 {
			t.Fatalf("halves(%v) = %v | %v", perm, minority, majority)
		}
		g := splitGroups(minority, majority)
		symmetric(t, g)
		for _, a := range minority {
			if got := len(g.reachable(n, a)); got != len(minority) {
				t.Errorf("minority node %d reaches %d nodes, want %d", a, got, len(minority))
			}
		}
		for _, a := range majority {
			if got := len(g.reachable(n, a)); got <= n/2 {
				t.Errorf("majority node %d reaches only %d nodes", a, got)
			}
		}
	}
}

func TestMajoritiesRing(t *testing.T) {
	perm := []int{3, 0, 4, 1, 2}
	g, err := majoritiesRing(perm)
	if err != nil {
		t.Fatal(err)
	}
	symmetric(t, g)
	n := len(perm)
	seen := map[string]int{}
	for i := range n {
		r := g.reachable(n, i)
		if len(r) != n/2+1 {
			t.Errorf("node %d reaches %v, want exactly a majority", i, r)
		}
		seen[fmt2(r)]++
	}
	// Every node has its own majority: no two nodes see the same one.
	for k, c := range seen {
		if c > 1 {
			t.Errorf("%d nodes see the same majority %s", c, k)
		}
	}
	// Ring neighbours (in perm order) stay connected.
	for i := range n {
		a, b := perm[i], perm[(i+1)%n]
		if slices.Contains(g[a], b) {
			t.Errorf("ring neighbours %d and %d were cut", a, b)
		}
	}
}

func TestMajoritiesRingNeedsFive(t *testing.T) {
	if _, err := majoritiesRing([]int{0, 1, 2}); err == nil {
		t.Fatal("a 3-node ring cuts nothing; want an error")
	}
}

func TestBridge(t *testing.T) {
	perm := []int{4, 2, 0, 3, 1}
	g, b, err := bridgeSplit(perm)
	if err != nil {
		t.Fatal(err)
	}
	symmetric(t, g)
	if b != 0 {
		t.Fatalf("bridge = %d, want perm's middle element 0", b)
	}
	n := len(perm)
	if got := g.reachable(n, b); len(got) != n {
		t.Errorf("bridge reaches %v, want everyone", got)
	}
	for _, l := range []int{4, 2} {
		for _, r := range []int{3, 1} {
			if !slices.Contains(g[l], r) {
				t.Errorf("%d and %d (opposite sides) can still talk", l, r)
			}
		}
		if got := len(g.reachable(n, l)); got != 3 {
			t.Errorf("side node %d reaches %d nodes, want its side plus the bridge (3)", l, got)
		}
	}
	if _, _, err := bridgeSplit([]int{0, 1, 2}); err == nil {
		t.Error("bridge with 3 nodes: want an error")
	}
}

func TestDescribe(t *testing.T) {
	names := []string{"n1", "n2", "n3"}
	if got := isolate(3, 1).describe(names); got != "cut n1-x-n2 n2-x-n3" {
		t.Errorf("describe = %q", got)
	}
	if got := (grudge{}).describe(names); got != "no links cut" {
		t.Errorf("describe empty = %q", got)
	}
	if got := groupNames(names, []int{2}, []int{0, 1}); got != "{n3} | {n1 n2}" {
		t.Errorf("groupNames = %q", got)
	}
}

func fmt2(xs []int) string {
	b := make([]byte, 0, len(xs))
	for _, x := range xs {
		b = append(b, byte('0'+x))
	}
	return string(b)
}
