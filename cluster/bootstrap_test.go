package cluster

import (
	"errors"
	"strings"
	"testing"
)

func member(id string) BootstrapMember {
	return BootstrapMember{ID: id, RaftAddr: id + ":7000", HTTPAddr: id + ":8080"}
}

func info(id string, expect int, hasState bool) BootstrapInfo {
	return BootstrapInfo{BootstrapMember: member(id), Expect: expect, HasState: hasState}
}

// The claimer is the lowest id among the expect lowest stateless nodes that
// expect as many; nodes with state or another expectation do not count.
func TestChooseClaim(t *testing.T) {
	infos := []BootstrapInfo{info("n3", 3, false), info("n0", 3, true), info("n1", 5, false), info("n4", 3, false)}
	c, _ := chooseClaim(member("n2"), 3, infos)
	if c == nil || c.By != "n2" || len(c.Members) != 3 || c.Members[0].ID != "n2" || c.Members[2].ID != "n4" {
		t.Fatalf("n2 with n3, n4: claim %+v, want n2 claiming n2, n3, n4", c)
	}
	if c, note := chooseClaim(member("n3"), 3, []BootstrapInfo{info("n2", 3, false), info("n4", 3, false)}); c != nil || !strings.Contains(note, "waiting for n2") {
		t.Fatalf("n3 is not the lowest: %+v %q", c, note)
	}
	if c, note := chooseClaim(member("n2"), 3, []BootstrapInfo{info("n3", 3, false), info("n1", 5, false)}); c != nil || note != "met 2 of 3 nodes" {
		t.Fatalf("too few: %+v %q", c, note)
	}
	// More stateless nodes than expected: the lowest ids form the cluster.
	c, _ = chooseClaim(member("n1"), 2, []BootstrapInfo{info("n3", 2, false), info("n2", 2, false)})
	if c == nil || len(c.Members) != 2 || c.Members[1].ID != "n2" {
		t.Fatalf("n1 of three: %+v, want n1 and n2", c)
	}
}

// A node refuses a claim it is not in, of another size, when it was not
// asked to bootstrap, or once it has Raft state.
func TestCheckClaim(t *testing.T) {
	c := BootstrapClaim{By: "n1", Members: []BootstrapMember{member("n1"), member("n2"), member("n3")}}
	if err := checkClaim(c, "n2", 3, false); err != nil {
		t.Fatalf("a fitting claim refused: %v", err)
	}
	for name, err := range map[string]error{
		"not a member":     checkClaim(c, "n4", 3, false),
		"other size":       checkClaim(c, "n2", 5, false),
		"no expect":        checkClaim(c, "n2", 0, false),
		"has state":        checkClaim(c, "n2", 3, true),
		"not a member (5)": checkClaim(BootstrapClaim{By: "n1"}, "n2", 3, false),
	} {
		if !errors.Is(err, ErrClaimRefused) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
	other := BootstrapClaim{By: "n0", Members: c.Members}
	if c.same(other) || !c.same(BootstrapClaim{By: "n1", Members: append([]BootstrapMember(nil), c.Members...)}) {
		t.Fatal("same() compares claimer and members")
	}
}
