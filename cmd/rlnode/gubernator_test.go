package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/cmd/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/gubapi/gubpb"
	win "github.com/rlnode/rlnode/window"
)

const gubToken = "gub-test-token"

// gubNodes starts n nodes serving gubernator's API with the cluster token
// (and extra flags) and returns them with V1 clients by id.
func gubNodes(t *testing.T, n int, extra ...string) ([]*proctest.Node, map[string]gubpb.V1Client) {
	t.Helper()
	return gubNodesOf(t, rlnodeBin, gubToken, n, extra...)
}

// gubNodesOf is gubNodes with a binary and a cluster token ("": none) of
// the caller's choice.
func gubNodesOf(t *testing.T, bin, token string, n int, extra ...string) ([]*proctest.Node, map[string]gubpb.V1Client) {
	t.Helper()
	addrs := map[string]string{}
	var nodes []*proctest.Node
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("n%d", i)
		addrs[id] = proctest.FreeAddr(t)
		args := append([]string{"--gubernator-addr", addrs[id]}, extra...)
		if token != "" {
			args = append(args, "--cluster-token", token)
		}
		if i > 1 {
			args = append(args, "--join", nodes[0].URL())
		}
		nodes = append(nodes, proctest.StartNode(t, bin, id, args...))
		proctest.WaitReady(t, nodes[i-1], 15*time.Second)
	}
	proctest.WaitVoters(t, nodes[0], n, 30*time.Second)
	clients := map[string]gubpb.V1Client{}
	for id, a := range addrs {
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		clients[id] = gubpb.NewV1Client(conn)
	}
	return nodes, clients
}

func gubCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+gubToken), 10*time.Second)
}

func gubAsk(t *testing.T, c gubpb.V1Client, reqs ...*gubpb.RateLimitReq) []*gubpb.RateLimitResp {
	t.Helper()
	ctx, cancel := gubCtx()
	defer cancel()
	resp, err := c.GetRateLimits(ctx, &gubpb.GetRateLimitsReq{Requests: reqs})
	if err != nil {
		t.Fatalf("GetRateLimits: %v", err)
	}
	if len(resp.Responses) != len(reqs) {
		t.Fatalf("%d answers to %d items", len(resp.Responses), len(reqs))
	}
	return resp.Responses
}

type gubWant struct {
	over             bool
	limit, remaining int64
	err              string
}

func checkGub(t *testing.T, what string, got *gubpb.RateLimitResp, w gubWant) {
	t.Helper()
	if (got.Status == gubpb.Status_OVER_LIMIT) != w.over || got.Limit != w.limit || got.Remaining != w.remaining || !strings.Contains(got.Error, w.err) || (w.err == "") != (got.Error == "") {
		t.Fatalf("%s: got %v, want %+v", what, got, w)
	}
}

// TestGubernatorAPIThroughAFollower: gubernator's V1 API answers through
// any node of a three-node cluster, under the cluster token, with
// gubernator's numbers: a token bucket with a limit change, DRAIN_OVER_LIMIT
// and RESET_REMAINING, a leaky bucket, and a mixed batch whose bad items
// get their own error while the others are decided.
func TestGubernatorAPIThroughAFollower(t *testing.T) {
	nodes, clients := gubNodes(t, 3)
	leader := leaderOf(t, nodes)
	follower := nodes[0]
	if follower == leader {
		follower = nodes[1]
	}
	c := clients[follower.ID]
	tok := func(hits, limit int64, b gubpb.Behavior) *gubpb.RateLimitReq {
		return &gubpb.RateLimitReq{Name: "api", UniqueKey: "acct:1", Hits: hits, Limit: limit, Duration: 60_000, Behavior: b}
	}
	start := time.Now().UnixMilli()
	r := gubAsk(t, c, tok(1, 100, 0))[0]
	checkGub(t, "first hit", r, gubWant{limit: 100, remaining: 99})
	if r.ResetTime < start+59_000 || r.ResetTime > time.Now().UnixMilli()+61_000 {
		t.Fatalf("reset time %d, want about a minute from %d", r.ResetTime, start)
	}
	checkGub(t, "limit lowered to 10", gubAsk(t, c, tok(1, 10, 0))[0], gubWant{limit: 10, remaining: 8})
	checkGub(t, "more than remains", gubAsk(t, c, tok(9, 10, 0))[0], gubWant{over: true, limit: 10, remaining: 8})
	checkGub(t, "drain", gubAsk(t, c, tok(9, 10, gubpb.Behavior_DRAIN_OVER_LIMIT))[0], gubWant{over: true, limit: 10, remaining: 0})
	checkGub(t, "empty", gubAsk(t, c, tok(1, 10, 0))[0], gubWant{over: true, limit: 10, remaining: 0})
	checkGub(t, "reset", gubAsk(t, c, tok(1, 10, gubpb.Behavior_RESET_REMAINING))[0], gubWant{limit: 10, remaining: 10})
	checkGub(t, "after reset", gubAsk(t, c, tok(1, 10, 0))[0], gubWant{limit: 10, remaining: 9})

	leaky := &gubpb.RateLimitReq{Name: "api", UniqueKey: "acct:2", Hits: 3, Limit: 10, Duration: 30_000, Algorithm: gubpb.Algorithm_LEAKY_BUCKET}
	batch := gubAsk(t, c, leaky, &gubpb.RateLimitReq{Name: "api", Hits: 1, Limit: 5, Duration: 1000},
		&gubpb.RateLimitReq{UniqueKey: "k", Hits: 1, Limit: 5, Duration: 1000}, leaky,
		&gubpb.RateLimitReq{Name: "api", UniqueKey: "acct:3", Hits: 1, Limit: 5, Duration: 1000, Algorithm: 7})
	checkGub(t, "leaky", batch[0], gubWant{limit: 10, remaining: 7})
	checkGub(t, "no key", batch[1], gubWant{err: "field 'unique_key' cannot be empty"})
	checkGub(t, "no name", batch[2], gubWant{err: "field 'namespace' cannot be empty"})
	checkGub(t, "leaky again", batch[3], gubWant{limit: 10, remaining: 4})
	checkGub(t, "bad algorithm", batch[4], gubWant{err: "Invalid rate limit algorithm '7'"})

	// A policy of the item's name decides it, not the item's own limit.
	if r, err := proctest.Do("PUT", leader.URL()+"/v1/policies/pinned", gubToken, map[string]any{
		"algorithm": "fixed_window", "limits": []map[string]any{{"limit": 2, "window": "1h"}}}); err != nil || r.Status != 200 {
		t.Fatalf("put policy: %v %d %s", err, r.Status, r.Raw)
	}
	pinned := &gubpb.RateLimitReq{Name: "pinned", UniqueKey: "acct:9", Hits: 1, Limit: 100, Duration: 60_000}
	proctest.Poll(t, 10*time.Second, func() error { // the follower's table may lag; the leader's entry decides anyway
		if r := gubAsk(t, c, pinned)[0]; r.Limit != 2 {
			return fmt.Errorf("limit %d, want the policy's 2", r.Limit)
		}
		return nil
	})
	checkGub(t, "pinned, second", gubAsk(t, c, pinned)[0], gubWant{limit: 2, remaining: 0})
	checkGub(t, "pinned, third", gubAsk(t, c, pinned)[0], gubWant{over: true, limit: 2, remaining: 0})

	// The gateway on the HTTP port, as gubernator's grpc-gateway spells it.
	resp, err := proctest.DoRaw("POST", leader.URL()+"/v1/GetRateLimits", "", []byte(`{"requests":[{"name":"api","unique_key":"acct:1","hits":"1","limit":"10","duration":"60000"}]}`))
	var gw struct {
		Responses []map[string]any `json:"responses"`
	}
	if err != nil || resp.Status != 200 || json.Unmarshal(resp.Raw, &gw) != nil || len(gw.Responses) != 1 ||
		gw.Responses[0]["status"] != "UNDER_LIMIT" || gw.Responses[0]["limit"] != "10" || gw.Responses[0]["remaining"] != "8" || gw.Responses[0]["reset_time"] == "0" {
		t.Fatalf("gateway: %v %d %s", err, resp.Status, resp.Raw)
	}
	proctest.Poll(t, 10*time.Second, func() error {
		var health map[string]any
		if resp, err := proctest.Get(follower.URL() + "/v1/HealthCheck"); err != nil || json.Unmarshal(resp.Raw, &health) != nil || health["status"] != "healthy" || health["peer_count"] != float64(3) {
			return fmt.Errorf("health: %v %s", err, resp.Raw)
		}
		return nil
	})

	// The gateway's errors are gRPC statuses as grpc-gateway writes them.
	many := `{"requests":[` + strings.Repeat(`{"name":"api","unique_key":"acct:1","hits":"1","limit":"10","duration":"60000"},`, 1000) + `{}]}`
	for body, code := range map[string]float64{many: 11, `{"requests":[{"hits":"x"}]}`: 3} {
		resp, err := proctest.DoRaw("POST", follower.URL()+"/v1/GetRateLimits", "", []byte(body))
		var st map[string]any
		if err != nil || resp.Status != 400 || json.Unmarshal(resp.Raw, &st) != nil || st["code"] != code {
			t.Fatalf("gateway error: %v %d %.200s", err, resp.Status, resp.Raw)
		}
	}

	// Without the token, nothing is decided.
	_, err = c.GetRateLimits(context.Background(), &gubpb.GetRateLimitsReq{Requests: []*gubpb.RateLimitReq{tok(1, 10, 0)}})
	if grpcstatus.Code(err) != codes.Unauthenticated {
		t.Fatalf("without the token: %v", err)
	}
	// gubernator's batch size.
	big := make([]*gubpb.RateLimitReq, 1001)
	for i := range big {
		big[i] = tok(1, 10, 0)
	}
	ctx, cancel := gubCtx()
	defer cancel()
	if _, err := c.GetRateLimits(ctx, &gubpb.GetRateLimitsReq{Requests: big}); grpcstatus.Code(err) != codes.OutOfRange {
		t.Fatalf("1,001 items: %v", err)
	}
	checkGub(t, "nothing of the refused calls counted", gubAsk(t, c, tok(0, 10, 0))[0], gubWant{limit: 10, remaining: 8})

	// rlnode top lists per-call keys by their name (a member that does
	// not answer within a second is left out of a list: ask again).
	proctest.Poll(t, 10*time.Second, func() error {
		top, err := proctest.Do("GET", leader.URL()+"/v1/top?policy=api", gubToken, nil)
		if err != nil || top.Status != 200 || !strings.Contains(string(top.Raw), `"policy":"api"`) || !strings.Contains(string(top.Raw), `"key":"acct:1"`) {
			return fmt.Errorf("top: %v %d %s", err, top.Status, top.Raw)
		}
		return nil
	})
}

// TestGubernatorOneKeyThroughThreeNodes: one key of 1,000 per minute,
// hammered through all three nodes at once, allows exactly 1,000, with
// BATCHING and with GLOBAL (which rlnode decides as strictly as any
// item: gubernator's GLOBAL lets each node answer from a copy).
func TestGubernatorOneKeyThroughThreeNodes(t *testing.T) {
	nodes, clients := gubNodes(t, 3)
	for _, b := range []gubpb.Behavior{gubpb.Behavior_BATCHING, gubpb.Behavior_GLOBAL} {
		var allowed, answered atomic.Int64
		var wg sync.WaitGroup
		for _, n := range nodes {
			for w := 0; w < 4; w++ {
				wg.Add(1)
				go func(c gubpb.V1Client) {
					defer wg.Done()
					for i := 0; i < 100; i++ {
						ctx, cancel := gubCtx()
						req := make([]*gubpb.RateLimitReq, 1+i%3)
						for j := range req {
							req[j] = &gubpb.RateLimitReq{Name: "hammer", UniqueKey: b.String(), Hits: 1, Limit: 1000, Duration: 60_000, Behavior: b}
						}
						resp, err := c.GetRateLimits(ctx, &gubpb.GetRateLimitsReq{Requests: req})
						cancel()
						if err != nil {
							continue // not counted or unknown: never counted as allowed here
						}
						for _, r := range resp.Responses {
							answered.Add(1)
							if r.Error == "" && r.Status == gubpb.Status_UNDER_LIMIT {
								allowed.Add(1)
							}
						}
					}
				}(clients[n.ID])
			}
		}
		wg.Wait()
		local := int64(0)
		for _, n := range nodes {
			local += leaseMetric(t, n.URL(), "rlnode_lease_local_decisions_total")
		}
		t.Logf("%s: %d allowed of %d answered, %d answered from node leases", b, allowed.Load(), answered.Load(), local)
		if got := allowed.Load(); got < 950 || got > 1000 || answered.Load() < 1100 {
			t.Fatalf("%s: %d allowed of %d answered; want 950 to 1,000 of more than 1,100", b, got, answered.Load())
		}
		// GLOBAL: most answers come from the nodes' leases (no log entry).
		if want := answered.Load() / 2; b == gubpb.Behavior_GLOBAL && local < want {
			t.Fatalf("GLOBAL: %d of %d answers from node leases, want at least %d", local, answered.Load(), want)
		}
	}
}

// TestGubernatorKeysBoundedPerCredential: a caller creating new per-call
// keys without end is refused at its credential's bound, item by item (the
// batch's other items are decided, its known keys still decide), and
// cannot take another credential's first key; the cluster's bound holds
// for everyone.
func TestGubernatorKeysBoundedPerCredential(t *testing.T) {
	nodes, clients := gubNodes(t, 1, "--gubernator-max-keys", "15", "--gubernator-max-keys-per-credential", "10")
	c := clients[nodes[0].ID]
	item := func(key string) *gubpb.RateLimitReq {
		return &gubpb.RateLimitReq{Name: "flood", UniqueKey: key, Hits: 1, Limit: 5, Duration: 600_000}
	}
	var batch []*gubpb.RateLimitReq
	for i := 0; i < 14; i++ {
		batch = append(batch, item(fmt.Sprintf("k%d", i)))
	}
	batch = append(batch, item("k0"))
	got := gubAsk(t, c, batch...)
	for i, r := range got[:14] {
		if i < 10 {
			checkGub(t, fmt.Sprintf("key %d", i), r, gubWant{limit: 5, remaining: 4})
		} else {
			checkGub(t, fmt.Sprintf("key %d past the bound", i), r, gubWant{err: "too many rate limit keys"})
		}
	}
	checkGub(t, "a known key in the same batch", got[14], gubWant{limit: 5, remaining: 3})
	for round := 0; round < 3; round++ {
		r := gubAsk(t, c, item(fmt.Sprintf("more%d", round)), item("k1"))
		checkGub(t, "another new key", r[0], gubWant{err: "too many rate limit keys"})
		checkGub(t, "a known key", r[1], gubWant{limit: 5, remaining: 3 - int64(round)})
	}

	// Another credential (the gateway counts the source address; the
	// gRPC calls above were the token's): its first keys are not refused,
	// until the cluster's bound of 15.
	for i := 0; i < 6; i++ {
		resp, err := proctest.DoRaw("POST", nodes[0].URL()+"/v1/GetRateLimits", "", []byte(fmt.Sprintf(`{"requests":[{"name":"flood","unique_key":"h%d","hits":"1","limit":"5","duration":"600000"}]}`, i)))
		if err != nil || resp.Status != 200 {
			t.Fatalf("gateway key %d: %v %d %s", i, err, resp.Status, resp.Raw)
		}
		full := strings.Contains(string(resp.Raw), "too many rate limit keys")
		if full != (i == 5) {
			t.Fatalf("gateway key %d (cluster bound 15, 10 stored by the token): %s", i, resp.Raw)
		}
	}
}

// TestAttackCallsHop: the leader's batched hop of per-call requests
// (/internal/v1/calls) takes nothing without the cluster token, refuses
// malformed, oversized and too-many-request bodies with 400 or 413
// before deciding anything, and the node keeps answering.
func TestAttackCallsHop(t *testing.T) {
	nodes, clients := gubNodes(t, 1)
	url := nodes[0].URL() + cluster.CallsPath
	hop := func(reqs int, key string) []byte {
		b := []byte{1}
		b = binary.AppendUvarint(b, uint64(reqs))
		e := fsm.EncodeCalls(fsm.CallsEntry{Now: 1, Owner: "x", MaxKeys: 1, MaxKeysPerOwner: 1, Items: []fsm.CallItem{
			{Name: "hop", Key: key, Call: win.Call{Alg: win.CallTokenBucket, Hits: 1, Limit: 5, Duration: 60_000}}}})
		for range reqs {
			b = binary.AppendUvarint(b, uint64(len(e)))
			b = append(b, e...)
		}
		return b
	}
	if r, err := proctest.DoRaw("POST", url, "", hop(1, "a")); err != nil || (r.Status != 401 && r.Status != 403) {
		t.Fatalf("without the token: %v %d %s", err, r.Status, r.Raw)
	}
	good := hop(1, "a")
	for name, body := range map[string][]byte{
		"truncated":        good[:len(good)-3],
		"garbage":          []byte("\x01\xff\xff\xff\xff\x0f"),
		"too many":         hop(257, "b"),
		"trailing":         append(append([]byte(nil), good...), 0),
		"unknown version":  append([]byte{9}, good[1:]...),
		"larger than 8MiB": append(hop(1, "c"), make([]byte, 9<<20)...),
	} {
		r, err := proctest.DoRaw("POST", url, gubToken, body)
		if err != nil || (r.Status != 400 && r.Status != 413) {
			t.Fatalf("%s: %v %d %s", name, err, r.Status, r.Raw)
		}
	}
	// Nothing of those was decided: the keys are untouched.
	for _, key := range []string{"a", "b", "c"} {
		got := gubAsk(t, clients[nodes[0].ID], &gubpb.RateLimitReq{Name: "hop", UniqueKey: key, Hits: 1, Limit: 5, Duration: 60_000})
		checkGub(t, "key "+key+" after the refused hops", got[0], gubWant{limit: 5, remaining: 4})
	}
	if r, err := proctest.DoRaw("POST", url, gubToken, hop(1, "d")); err != nil || r.Status != 200 {
		t.Fatalf("a well-formed hop: %v %d %s", err, r.Status, r.Raw)
	}
}
