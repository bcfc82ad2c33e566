package main

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseNemesesAllByClusterSize(t *testing.T) {
	three, skipped, err := parseNemeses("all", 3, true)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(three, nemPartitionRing) || slices.Contains(three, nemPartitionBridge) {
		t.Errorf("all with 3 nodes includes 5-node faults: %v", three)
	}
	if !slices.Equal(skipped, []string{nemPartitionRing, nemPartitionBridge}) {
		t.Errorf("skipped = %v", skipped)
	}
	if len(three) != len(allNemeses)-2 {
		t.Errorf("all with 3 nodes = %v", three)
	}
	five, skipped, err := parseNemeses("all", 5, true)
	if err != nil || len(skipped) != 0 {
		t.Fatal(err, skipped)
	}
	if !slices.Equal(five, allNemeses) {
		t.Errorf("all with 5 nodes = %v", five)
	}
}

func TestParseNemesesListsAndAliases(t *testing.T) {
	got, _, err := parseNemeses(" kill, clock-skew ,kill,none", 3, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{nemKill, nemClockForward, nemClockBackward}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v (de-duplicated, in order)", got, want)
	}
	if got, _, _ := parseNemeses("none", 3, true); len(got) != 0 {
		t.Errorf("none = %v", got)
	}
	if _, _, err := parseNemeses("kill,frobnicate", 3, true); err == nil || !strings.Contains(err.Error(), "frobnicate") {
		t.Errorf("unknown nemesis: err = %v", err)
	}
	// Named explicitly, a fault that cannot run is an error, not a skip.
	if _, _, err := parseNemeses("partition-ring", 3, true); err == nil {
		t.Error("partition-ring with 3 nodes: want an error")
	}
	if got, _, err := parseNemeses("partition", 5, true); err != nil || len(got) != 4 {
		t.Errorf("partition with 5 nodes = %v, %v", got, err)
	}
	// raise-limit raises the run's own policies: without them it is
	// skipped from an alias and an error when named.
	got, skipped, err := parseNemeses("all", 3, false)
	if err != nil || slices.Contains(got, nemRaiseLimit) || !slices.Contains(skipped, nemRaiseLimit) {
		t.Errorf("all without policies = %v, skipped %v, %v", got, skipped, err)
	}
	if _, _, err := parseNemeses("raise-limit", 3, false); err == nil || !strings.Contains(err.Error(), "--policies") {
		t.Errorf("raise-limit without policies: err = %v", err)
	}
}

func TestEffectiveDurationExtendsForOneRound(t *testing.T) {
	list, _, _ := parseNemeses("all", 3, true)
	fault, quiet := 4*time.Second, 3*time.Second
	d, extended := effectiveDuration(list, 120*time.Second, fault, quiet)
	if extended || d != 120*time.Second {
		t.Errorf("120s for %d nemeses: got %s extended=%v, want unchanged", len(list), d, extended)
	}
	d, extended = effectiveDuration(list, 20*time.Second, fault, quiet)
	if !extended || d < time.Duration(len(list))*(fault+quiet) {
		t.Errorf("20s: got %s extended=%v, want at least one full round", d, extended)
	}
	if d, ext := effectiveDuration(nil, 30*time.Second, fault, quiet); ext || d != 30*time.Second {
		t.Errorf("no nemeses: %s %v", d, ext)
	}
}

func TestBuildPlan(t *testing.T) {
	list, _, _ := parseNemeses("all", 5, true)
	fault, quiet := 4*time.Second, 3*time.Second
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		plan := buildPlan(list, 120*time.Second, fault, quiet, rng)
		// The first round runs every nemesis exactly once.
		first := slices.Clone(plan[:len(list)])
		slices.Sort(first)
		want := slices.Clone(list)
		slices.Sort(want)
		if !slices.Equal(first, want) {
			t.Fatalf("seed %d: first round %v is not a permutation of %v", seed, plan[:len(list)], list)
		}
		// Enough faults to fill the duration.
		if roundTime(plan, fault, quiet) < 120*time.Second {
			t.Fatalf("seed %d: plan of %d faults is shorter than the duration", seed, len(plan))
		}
		for i := 1; i < len(plan); i++ {
			if plan[i] == plan[i-1] {
				t.Fatalf("seed %d: %s twice in a row at %d", seed, plan[i], i)
			}
		}
	}
	if buildPlan(nil, time.Minute, fault, quiet, rand.New(rand.NewPCG(1, 1))) != nil {
		t.Error("empty list: want empty plan")
	}
}

func TestCIScheduleFits(t *testing.T) {
	// The CI run (3 nodes, --duration 120s, defaults) must get every
	// nemesis in without extending the duration.
	list, _, _ := parseNemeses("all", 3, true)
	if _, extended := effectiveDuration(list, 120*time.Second, 4*time.Second, 3*time.Second); extended {
		t.Errorf("one round of %v does not fit in 120s: %s", list, roundTime(list, 4*time.Second, 3*time.Second))
	}
}
