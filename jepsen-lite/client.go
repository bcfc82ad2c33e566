package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// outcomeFail marks an op that certainly had no effect: a hit answered 503
// not_counted / no_leader, or a request that never left the runner (dial
// refused). It is kept in history.jsonl for availability, but never given
// to the checker, which knows only ok and unknown.
const outcomeFail checker.Outcome = "fail"

// opRecord is one line of history.jsonl: a checker.Op plus what the runner
// saw on the wire, for a human reading a failing history. It still decodes
// as a checker.Op.
type opRecord struct {
	checker.Op
	Status   int    `json:"status,omitempty"` // HTTP status; 0 if no response
	Code     string `json:"code,omitempty"`   // problem "code" of an error answer
	ServedBy string `json:"servedBy,omitempty"`
	// Resent marks a synthetic unknown hit added because Go's transport
	// silently re-sent a request after the first attempt had been
	// written: that first attempt may have counted too.
	Resent bool `json:"resent,omitempty"`
}

// workloadConfig is what the client workers need.
type workloadConfig struct {
	t0        time.Time
	nodes     []nodeSpec
	keys      []string
	clients   int
	rate      float64 // total ops/s over all workers; 0 = as fast as possible
	peekRatio float64
	timeout   time.Duration
	seed      uint64
	tls       *tls.Config // client certificate and CA; nil for plain HTTP
}

// workload runs the client workers. start launches them; stop (called by
// the owner, main) asks them to finish their current op, waits, and returns
// the merged history.
type workload struct {
	cfg      workloadConfig
	hc       *http.Client
	stopCh   chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	perWork  [][]opRecord // worker i appends only to perWork[i]
	history  []opRecord
}

func newWorkload(cfg workloadConfig) *workload {
	// One shared keep-alive pool, big enough that no worker ever waits for
	// an idle connection to another worker's node.
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: cfg.timeout, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConns:        cfg.clients * len(cfg.nodes) * 2,
		MaxIdleConnsPerHost: cfg.clients * 2,
		IdleConnTimeout:     60 * time.Second,
		DisableCompression:  true,
		TLSClientConfig:     cfg.tls,
	}
	return &workload{cfg: cfg, hc: &http.Client{Transport: tr}, stopCh: make(chan struct{}),
		perWork: make([][]opRecord, cfg.clients)}
}

// start launches the workers. In-flight requests are bounded by abort
// (Ctrl-C) and their own timeout, never by stop: an op that was sent is
// always allowed to finish, so stopping does not manufacture unknowns.
func (w *workload) start(abort context.Context) {
	for i := range w.cfg.clients {
		w.wg.Go(func() { w.worker(abort, i) })
	}
}

// stop ends the workload and returns the history sorted by invocation,
// with op IDs assigned in that order. It is safe to call more than once.
func (w *workload) stop() []opRecord {
	w.stopOnce.Do(func() {
		close(w.stopCh)
		w.wg.Wait()
		w.hc.CloseIdleConnections()
		var all []opRecord
		for _, ops := range w.perWork {
			all = append(all, ops...)
		}
		slices.SortStableFunc(all, func(a, b opRecord) int {
			if a.Invoke != b.Invoke {
				return int(a.Invoke - b.Invoke)
			}
			return a.Client - b.Client
		})
		for i := range all {
			all[i].ID = i
		}
		w.history = all
	})
	return w.history
}

func (w *workload) worker(abort context.Context, id int) {
	rng := rand.New(rand.NewPCG(w.cfg.seed, uint64(id)+1))
	var gap time.Duration
	if w.cfg.rate > 0 {
		gap = time.Duration(float64(w.cfg.clients) / w.cfg.rate * float64(time.Second))
	}
	for {
		select {
		case <-w.stopCh:
			return
		case <-abort.Done():
			return
		default:
		}
		if gap > 0 {
			// Exponential think time: arrivals look like independent
			// users rather than a metronome, which is what finds races.
			t := time.NewTimer(time.Duration(rng.ExpFloat64() * float64(gap)))
			select {
			case <-w.stopCh:
				t.Stop()
				return
			case <-abort.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		node := w.cfg.nodes[rng.IntN(len(w.cfg.nodes))]
		key := w.cfg.keys[rng.IntN(len(w.cfg.keys))]
		kind := checker.KindHit
		if rng.Float64() < w.cfg.peekRatio {
			kind = checker.KindPeek
		}
		w.perWork[id] = append(w.perWork[id], w.do(abort, id, kind, node, key)...)
	}
}

// do performs one op and returns its record, plus one synthetic unknown
// hit per extra time the transport wrote the request (see opRecord.Resent).
func (w *workload) do(abort context.Context, client int, kind checker.Kind, node nodeSpec, key string) []opRecord {
	path := "/check/" + key
	if kind == checker.KindPeek {
		path = "/v1/status/" + key
	}
	var written atomic.Int32
	trace := &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				written.Add(1)
			}
		},
	}
	ctx, cancel := context.WithTimeout(abort, w.cfg.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, node.url()+path, nil)
	if err != nil {
		panic(fmt.Sprintf("build request for %s: %v", node.url()+path, err)) // our own URL; cannot happen
	}
	invoke := time.Since(w.cfg.t0).Nanoseconds()
	resp, err := w.hc.Do(req)
	var (
		status   int
		body     []byte
		servedBy string
	)
	if err == nil {
		status = resp.StatusCode
		servedBy = resp.Header.Get("X-Rlnode-Served-By")
		body, err = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}
	ret := time.Since(w.cfg.t0).Nanoseconds()

	rec := classify(kind, status, body, err, written.Load() > 0)
	rec.Client, rec.Kind, rec.Key, rec.Node = client, kind, key, node.id
	rec.Invoke, rec.Return, rec.ServedBy = invoke, ret, servedBy
	out := []opRecord{rec}
	// A response means the last attempt was written; every earlier
	// written attempt is a hit that may also have counted.
	extra := int(written.Load()) - 1
	if kind == checker.KindHit {
		for range extra {
			r := opRecord{Resent: true}
			r.Client, r.Kind, r.Key, r.Node = client, kind, key, node.id
			r.Invoke, r.Return, r.Outcome = invoke, ret, checker.OutcomeUnknown
			r.Error = "the HTTP transport re-sent this request; an earlier attempt may have counted"
			out = append(out, r)
		}
	}
	return out
}

// classify turns what came back into an outcome. It is pure so the rules
// are unit-tested:
//   - 200/429 with a well-formed body: ok (a definite answer);
//   - 503 not_counted / no_leader (and not_leader for reads): fail, the op
//     certainly had no effect;
//   - no response and the request never written (refused dial, dial
//     timeout): fail, nothing reached a node;
//   - anything else (timeout after sending, reset, 503 outcome_unknown,
//     other statuses, malformed bodies): unknown.
func classify(kind checker.Kind, status int, body []byte, transportErr error, sent bool) opRecord {
	var r opRecord
	r.Status = status
	if transportErr != nil {
		r.Error = transportErr.Error()
		if status == 0 && !sent {
			r.Outcome = outcomeFail
			r.Error = "not sent: " + r.Error
		} else {
			r.Outcome = checker.OutcomeUnknown
		}
		return r
	}
	switch {
	case kind == checker.KindHit && (status == http.StatusOK || status == http.StatusTooManyRequests):
		var b struct {
			Allowed   *bool  `json:"allowed"`
			Remaining *int64 `json:"remaining"`
			ResetAt   *int64 `json:"resetAt"`
		}
		if err := json.Unmarshal(body, &b); err != nil || b.Allowed == nil || b.Remaining == nil || b.ResetAt == nil ||
			*b.Allowed != (status == http.StatusOK) {
			r.Outcome = checker.OutcomeUnknown
			r.Error = fmt.Sprintf("malformed %d body: %.200q", status, body)
			return r
		}
		r.Outcome, r.Allowed, r.Remaining, r.ResetAt = checker.OutcomeOK, *b.Allowed, *b.Remaining, *b.ResetAt
		return r
	case kind == checker.KindPeek && status == http.StatusOK:
		var b struct {
			WindowStart *int64 `json:"windowStart"`
			Used        *int64 `json:"used"`
			AppliedNow  *int64 `json:"appliedNow"`
		}
		if err := json.Unmarshal(body, &b); err != nil || b.WindowStart == nil || b.Used == nil || b.AppliedNow == nil {
			r.Outcome = checker.OutcomeUnknown
			r.Error = fmt.Sprintf("malformed 200 body: %.200q", body)
			return r
		}
		r.Outcome, r.WindowStart, r.Used, r.AppliedNow = checker.OutcomeOK, *b.WindowStart, *b.Used, *b.AppliedNow
		return r
	}
	var p struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	_ = json.Unmarshal(body, &p) // a body that is not a problem document leaves Code empty: unknown
	r.Code = p.Code
	r.Error = fmt.Sprintf("HTTP %d %s: %s", status, p.Code, p.Detail)
	notApplied := p.Code == "not_counted" || p.Code == "no_leader" || (kind == checker.KindPeek && p.Code == "not_leader")
	if status == http.StatusServiceUnavailable && notApplied {
		r.Outcome = outcomeFail
	} else {
		r.Outcome = checker.OutcomeUnknown
	}
	return r
}

// checkerHistory is what the checker judges: every ok and unknown op, none
// of the certainly-failed ones.
func checkerHistory(recs []opRecord) []checker.Op {
	out := make([]checker.Op, 0, len(recs))
	for _, r := range recs {
		if r.Outcome == outcomeFail {
			continue
		}
		out = append(out, r.Op)
	}
	return out
}
