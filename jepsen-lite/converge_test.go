package main

import (
	"errors"
	"strings"
	"testing"
)

func TestDivergences(t *testing.T) {
	seen := map[uint64]map[string][]string{
		10: {"aa": {"n1", "n2", "n3"}},
		12: {"bb": {"n2"}, "cc": {"n3", "n1"}},
	}
	div := divergences(seen)
	if len(div) != 1 || div[0] != "index 12: n1,n3=cc n2=bb" && div[0] != "index 12: n2=bb n1,n3=cc" {
		t.Fatalf("divergences = %q", div)
	}
}

func TestPollProblem(t *testing.T) {
	names := []string{"n1", "n2", "n3"}
	st := func(leader string, idx uint64, digest string) nodeStatus {
		return nodeStatus{LeaderID: leader, AppliedIndex: idx, DigestIndex: idx, Digest: digest}
	}
	good := clusterPoll{
		status: []nodeStatus{st("n2", 7, "d"), st("n2", 7, "d"), st("n2", 7, "d")},
		errs:   make([]error, 3),
		voters: []string{"n1", "n2", "n3"},
	}
	if p := good.problem(names, true); p != "" {
		t.Fatalf("good poll: %s", p)
	}
	lag := good
	lag.status = []nodeStatus{st("n2", 7, "d"), st("n2", 6, "x"), st("n2", 7, "d")}
	if p := lag.problem(names, true); !strings.Contains(p, "state differs") {
		t.Errorf("lagging node: %q", p)
	}
	if p := lag.problem(names, false); p != "" {
		t.Errorf("settle ignores digests, got %q", p)
	}
	split := good
	split.status = []nodeStatus{st("n2", 7, "d"), st("n1", 7, "d"), st("n2", 7, "d")}
	if p := split.problem(names, false); !strings.Contains(p, "leaders disagree") {
		t.Errorf("two leaders: %q", p)
	}
	members := good
	members.voters = []string{"n2", "n3"}
	if p := members.problem(names, false); !strings.Contains(p, "voters") {
		t.Errorf("missing voter: %q", p)
	}
	down := good
	down.errs = []error{nil, errors.New("connection refused"), nil}
	if p := down.problem(names, false); !strings.HasPrefix(p, "n2:") {
		t.Errorf("unreachable node: %q", p)
	}
	halted := good
	halted.status = []nodeStatus{st("n2", 7, "d"), st("n2", 7, "d"), {LeaderID: "n2", Halted: "bad entry"}}
	if p := halted.problem(names, false); !strings.Contains(p, "halted") {
		t.Errorf("halted FSM: %q", p)
	}
}
