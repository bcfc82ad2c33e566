package main

import (
	"context"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/rlqs/rlqstest"
)

// The real binary serves RLQS on --rlqs-addr behind the cluster token:
// an Envoy with the token gets token-bucket assignments that together
// never exceed a leased policy; one without it gets nothing.
func TestRLQSThroughTheBinary(t *testing.T) {
	const tok = "rlqs-test-token"
	const limit = 50
	rlqsAddr := proctest.FreeAddr(t)
	n := proctest.StartNode(t, rlnodeBin, "n1", "--cluster-token", tok, "--rlqs-addr", rlqsAddr, "--rlqs-lease", "1s")
	proctest.WaitReady(t, n, 15*time.Second)
	body := map[string]any{"name": "edge", "algorithm": "fixed_window", "consistency": "leased",
		"limits": []map[string]any{{"limit": limit, "window": "1h"}}}
	if r, err := n.Do("PUT", "/v1/policies/edge", tok, body); err != nil || (r.Status != 200 && r.Status != 201) {
		t.Fatalf("PUT policy: %v %d %s", err, r.Status, r.Raw)
	}

	bucket := map[string]string{"tenant": "acme"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var envoys []*rlqstest.Envoy
	for i := 0; i < 2; i++ {
		e, err := rlqstest.Start(rlqstest.Config{Addr: rlqsAddr, Domain: "edge", Interval: 200 * time.Millisecond, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		e.Allow(bucket)
		if err := e.WaitAssigned(ctx, bucket); err != nil {
			t.Fatal(err)
		}
		envoys = append(envoys, e)
	}
	allowed := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		for _, e := range envoys {
			if e.Allow(bucket) {
				allowed++
			}
		}
		time.Sleep(time.Millisecond)
	}
	if allowed > limit || allowed == 0 {
		t.Fatalf("%d allowed across two Envoys, limit %d", allowed, limit)
	}

	stranger, err := rlqstest.Start(rlqstest.Config{Addr: rlqsAddr, Domain: "edge", Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	stranger.Allow(bucket)
	short, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	if err := stranger.WaitAssigned(short, bucket); err == nil {
		t.Fatal("an Envoy without the cluster token got an assignment")
	}
}
