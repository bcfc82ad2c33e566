package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// The per-call workload (--percall) drives gubernator's API through the
// HTTP gateway (POST /v1/GetRateLimits) of random nodes, under the same
// faults as the hits: every call is a batch of three items of one hit, a
// token bucket key, a leaky bucket key and a GLOBAL token bucket key
// (answered from node leases once hot), each bringing its own limit (no
// policy declared). The checker's per-call model judges them: at most
// the limit per token window, windows never overlapping, and a leaky
// bucket never allowing more than a full bucket plus what leaked.
const (
	callTokenKey   = "jl-token"
	callLeakyKey   = "jl-leaky"
	callGlobalKey  = callTokenKey + "-global"
	callTokenLimit = 20
	callLeakyLimit = 10
	callWorkers    = 4
)

type callWorkload struct {
	http   *http.Client
	urls   []string
	dur    time.Duration
	t0     time.Time
	stopCh chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex
	ops    []checker.CallOp
	nextID int
}

type callItemResp struct {
	Status    string `json:"status"`
	Limit     string `json:"limit"`
	Remaining string `json:"remaining"`
	ResetTime string `json:"reset_time"`
	Error     string `json:"error"`
}

// startPerCall waits (bounded) for the version gate, then starts the
// workers; skipped (with the reason) when the cluster refuses the items.
func (r *runner) startPerCall(ctx context.Context, sec *security) (*callWorkload, string) {
	var urls []string
	for _, s := range r.cl.specs {
		urls = append(urls, s.url())
	}
	return newPerCall(ctx, urls, sec.client, r.o.timeout, r.o.window, r.o.seed, r.t0, budgetGateWait)
}

func newPerCall(ctx context.Context, urls []string, tlsConf *tls.Config, timeout, window time.Duration, seed uint64, t0 time.Time, gateWait time.Duration) (*callWorkload, string) {
	w := &callWorkload{http: &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: tlsConf}},
		urls: urls, dur: window, t0: t0, stopCh: make(chan struct{})}
	// Wait for the gate with a key of its own, so the workload's keys
	// start fresh.
	deadline := time.Now().Add(gateWait)
	for {
		code, body, err := w.post(ctx, urls[0], w.body("jl-gate", "jl-gate"))
		if err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Sprintf("gubernator's API did not answer for %s: %d %s %v", gateWait, code, body, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	for i := range callWorkers {
		rng := rand.New(rand.NewPCG(seed, uint64(2000+i)))
		w.wg.Go(func() { w.worker(ctx, rng) })
	}
	return w, ""
}

func (w *callWorkload) body(token, leaky string) []byte {
	ms := strconv.FormatInt(w.dur.Milliseconds(), 10)
	b, _ := json.Marshal(map[string]any{"requests": []map[string]any{
		{"name": "jl", "unique_key": token, "hits": 1, "limit": callTokenLimit, "duration": ms},
		{"name": "jl", "unique_key": leaky, "hits": 1, "limit": callLeakyLimit, "duration": ms, "algorithm": "LEAKY_BUCKET"},
		{"name": "jl", "unique_key": token + "-global", "hits": 1, "limit": callTokenLimit, "duration": ms, "behavior": "GLOBAL"},
	}})
	return b
}

func (w *callWorkload) post(ctx context.Context, url string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/GetRateLimits", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := w.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

func (w *callWorkload) since() int64 { return time.Since(w.t0).Nanoseconds() }

func (w *callWorkload) worker(ctx context.Context, rng *rand.Rand) {
	for {
		select {
		case <-w.stopCh:
			return
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(20+rng.IntN(80)) * time.Millisecond):
		}
		invoke := w.since()
		code, body, err := w.post(context.WithoutCancel(ctx), w.urls[rng.IntN(len(w.urls))], w.body(callTokenKey, callLeakyKey))
		ret := w.since()
		var resp struct {
			Responses []callItemResp `json:"responses"`
		}
		outcome := checker.OutcomeUnknown
		switch {
		case err != nil: // may have reached the log
		case code == http.StatusOK && json.Unmarshal(body, &resp) == nil && len(resp.Responses) == 3:
			outcome = checker.OutcomeOK
		case code >= 400 && code < 500, code == http.StatusServiceUnavailable && bytes.Contains(body, []byte("not counted")):
			outcome = outcomeFail
		}
		w.mu.Lock()
		for i, key := range []string{callTokenKey, callLeakyKey, callGlobalKey} {
			w.nextID++
			op := checker.CallOp{ID: w.nextID, Key: key, Leaky: i == 1, Invoke: invoke, Return: ret, Outcome: outcome}
			if outcome == checker.OutcomeOK {
				it := resp.Responses[i]
				if it.Error != "" {
					op.Outcome = outcomeFail
				}
				op.Allowed = it.Error == "" && it.Status == "UNDER_LIMIT"
				op.Limit, _ = strconv.ParseInt(it.Limit, 10, 64)
				op.Remaining, _ = strconv.ParseInt(it.Remaining, 10, 64)
				op.ResetTime, _ = strconv.ParseInt(it.ResetTime, 10, 64)
			}
			w.ops = append(w.ops, op)
		}
		w.mu.Unlock()
	}
}

// stop waits for the workers; a call in flight finishes first.
func (w *callWorkload) stop() []checker.CallOp {
	select {
	case <-w.stopCh:
	default:
		close(w.stopCh)
	}
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ops
}

// checkPerCall judges the per-call history; none allowed proves nothing.
func checkPerCall(ops []checker.CallOp, dur time.Duration, slackMs int64) ([]checker.Violation, string) {
	v := checker.CheckCalls(ops, checker.CallLimits{TokenLimit: callTokenLimit, LeakyLimit: callLeakyLimit, DurationMs: dur.Milliseconds()}, slackMs)
	var tok, leaky, global outcomeCount
	for _, op := range ops {
		switch {
		case op.Leaky:
			leaky.add(op.Outcome, op.Allowed)
		case op.Key == callGlobalKey:
			global.add(op.Outcome, op.Allowed)
		default:
			tok.add(op.Outcome, op.Allowed)
		}
	}
	if tok.made == 0 || leaky.made == 0 {
		v = append(v, checker.Violation{Check: checkPerCallVacuous, Key: "percall",
			Detail: fmt.Sprintf("%d token and %d leaky items allowed: the per-call workload proved nothing", tok.made, leaky.made)})
	}
	return v, fmt.Sprintf("per-call items: token %s; leaky %s; GLOBAL token %s", tok.String("allowed"), leaky.String("allowed"), global.String("allowed"))
}

const checkPerCallVacuous = "percall-vacuous"
