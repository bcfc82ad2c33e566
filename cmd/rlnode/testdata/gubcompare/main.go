// Command gubcompare sends a script of GetRateLimits calls to one V1
// server with gubernator's own Go client (v2.13.0, unchanged) and prints
// what it answered. TestGubernatorComparison builds it, and gubernator's
// server, from the Go module proxy and runs the same script against both
// gubernator and rlnode.
//
// Script (stdin, JSON): [{"sleepMs": N, "requests": [RateLimitReq as
// gubernator's gateway spells it, ...]}, ...]. Output (stdout, JSON): one
// entry per step: the ms the call was sent at, a call error, and per item
// status, limit, remaining, error and reset_time minus the send time
// (null when reset_time is 0).
//
// With -hammer ADDRS NAME KEY BEHAVIOR it hammers one key of 1,000 per
// minute through every address (comma separated) for 3 s, four callers
// each, batches of one to three items, and prints {"allowed": N,
// "answered": M}.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"google.golang.org/protobuf/encoding/protojson"
)

type step struct {
	SleepMs  int64             `json:"sleepMs"`
	Requests []json.RawMessage `json:"requests"`
}

type item struct {
	Status    string `json:"status"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
	Error     string `json:"error"`
	ResetIn   *int64 `json:"resetIn"`
}

type answer struct {
	SentMs int64  `json:"sentMs"`
	Err    string `json:"err,omitempty"`
	Items  []item `json:"items"`
}

func main() {
	if len(os.Args) == 6 && os.Args[1] == "-hammer" {
		hammer(strings.Split(os.Args[2], ","), os.Args[3], os.Args[4], os.Args[5])
		return
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gubcompare GRPC_ADDR < script.json")
		os.Exit(2)
	}
	var script []step
	if err := json.NewDecoder(os.Stdin).Decode(&script); err != nil {
		fail(err)
	}
	client, err := guber.DialV1Server(os.Args[1], nil)
	if err != nil {
		fail(err)
	}
	var out []answer
	for _, s := range script {
		time.Sleep(time.Duration(s.SleepMs) * time.Millisecond)
		req := &guber.GetRateLimitsReq{}
		for _, raw := range s.Requests {
			r := &guber.RateLimitReq{}
			if err := protojson.Unmarshal(raw, r); err != nil {
				fail(err)
			}
			req.Requests = append(req.Requests, r)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		a := answer{SentMs: time.Now().UnixMilli()}
		resp, err := client.GetRateLimits(ctx, req)
		cancel()
		if err != nil {
			a.Err = err.Error()
		}
		for _, r := range resp.GetResponses() {
			it := item{Status: r.Status.String(), Limit: r.Limit, Remaining: r.Remaining, Error: r.Error}
			if r.ResetTime != 0 {
				in := r.ResetTime - a.SentMs
				it.ResetIn = &in
			}
			a.Items = append(a.Items, it)
		}
		out = append(out, a)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

func hammer(addrs []string, name, key, behavior string) {
	b, ok := guber.Behavior_value[behavior]
	if !ok {
		fail(fmt.Errorf("unknown behavior %q", behavior))
	}
	var allowed, answered atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(3 * time.Second)
	for _, a := range addrs {
		client, err := guber.DialV1Server(a, nil)
		if err != nil {
			fail(err)
		}
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(stop); i++ {
					req := &guber.GetRateLimitsReq{}
					for range 1 + i%3 {
						req.Requests = append(req.Requests, &guber.RateLimitReq{Name: name, UniqueKey: key, Hits: 1,
							Limit: 1000, Duration: guber.Minute, Behavior: guber.Behavior(b)})
					}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					resp, err := client.GetRateLimits(ctx, req)
					cancel()
					if err != nil {
						continue // not counted or unknown: never counted as allowed
					}
					for _, r := range resp.GetResponses() {
						answered.Add(1)
						if r.Error == "" && r.Status == guber.Status_UNDER_LIMIT {
							allowed.Add(1)
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	if err := json.NewEncoder(os.Stdout).Encode(map[string]int64{"allowed": allowed.Load(), "answered": answered.Load()}); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gubcompare:", err)
	os.Exit(1)
}
