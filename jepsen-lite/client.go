package main

import (
	"bytes"
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
	Code     string `json:"code,omitempty"` // problem "code" of an error answer
	ServedBy string `json:"servedBy,omitempty"`
	// Resent marks a synthetic unknown hit added because Go's transport
	// silently re-sent a request after the first attempt had been
	// written: that first attempt may have counted too.
	Resent bool `json:"resent,omitempty"`
}

// workloadConfig is what the client workers need.
type workloadConfig struct {
	t0         time.Time
	nodes      []nodeSpec
	targets    []target
	pairs      [][2]int // indexes into targets: the keys multi-key checks go across
	clients    int
	rate       float64 // total ops/s over all workers; 0 = as fast as possible
	peekRatio  float64 // share of ops that are peeks (of fixed-window keys)
	multiRatio float64 // share of ops that are multi-key checks (of a pair)
	timeout    time.Duration
	seed       uint64
	tls        *tls.Config // client certificate and CA; nil for plain HTTP
	// appHolders is how many workers decide their leased keys' hits
	// through client.Local (appholder.go), each its own holder.
	appHolders int
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
	apps     []*appHolder // per worker; nil: all over HTTP
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
	w := &workload{cfg: cfg, hc: &http.Client{Transport: tr}, stopCh: make(chan struct{}),
		perWork: make([][]opRecord, cfg.clients), apps: make([]*appHolder, cfg.clients)}
	for i := range min(cfg.appHolders, cfg.clients) {
		// Config errors only (addresses the runner built): a worker
		// without its holder goes over HTTP.
		w.apps[i], _ = newAppHolder(cfg, tr)
	}
	return w
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
		for _, a := range w.apps {
			if a != nil {
				a.close()
			}
		}
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
	var zipf *rand.Zipf
	if n := w.warmCount(); n > 1 {
		zipf = rand.NewZipf(rng, 1.07, 1, uint64(n-1))
	}
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
		kind, ts := w.pick(rng, zipf)
		if a := w.apps[id]; a != nil && kind == checker.KindHit && ts[0].leased {
			ctx, cancel := context.WithTimeout(abort, w.cfg.timeout)
			w.perWork[id] = append(w.perWork[id], a.do(ctx, w.cfg.t0, id, ts[0]))
			cancel()
			continue
		}
		w.perWork[id] = append(w.perWork[id], w.do(abort, id, kind, node, ts)...)
	}
}

// warmShare is the share of hits that go to the warm keys.
const warmShare = 0.25

func (w *workload) warmCount() int {
	n := 0
	for _, t := range w.cfg.targets {
		if t.warm {
			n++
		}
	}
	return n
}

// pick chooses the next op: a peek of a fixed-window key, a multi-key
// check across a pair, a hit on a warm key (by zipf), or a hit on any
// other key.
func (w *workload) pick(rng *rand.Rand, zipf *rand.Zipf) (checker.Kind, []target) {
	r := rng.Float64()
	var fixed, warm, other []target
	for _, t := range w.cfg.targets {
		if t.fixed {
			fixed = append(fixed, t)
		}
		if t.warm {
			warm = append(warm, t)
		} else {
			other = append(other, t)
		}
	}
	switch {
	case r < w.cfg.peekRatio && len(fixed) > 0:
		return checker.KindPeek, []target{fixed[rng.IntN(len(fixed))]}
	case r < w.cfg.peekRatio+w.cfg.multiRatio && len(w.cfg.pairs) > 0:
		p := w.cfg.pairs[rng.IntN(len(w.cfg.pairs))]
		return checker.KindMulti, []target{w.cfg.targets[p[0]], w.cfg.targets[p[1]]}
	}
	if zipf != nil && rng.Float64() < warmShare {
		return checker.KindHit, []target{warm[zipf.Uint64()]}
	}
	return checker.KindHit, []target{other[rng.IntN(len(other))]}
}

// request builds the HTTP request of one op.
func request(ctx context.Context, kind checker.Kind, base string, ts []target) *http.Request {
	method, path, body := http.MethodGet, "", io.Reader(nil)
	switch kind {
	case checker.KindPeek:
		path = "/v1/status/" + keyPath(ts[0])
	case checker.KindHit:
		path = "/check/" + keyPath(ts[0])
	default:
		var hits []map[string]string
		for _, t := range ts {
			hits = append(hits, map[string]string{"policy": t.policy, "client": t.client})
		}
		b, _ := json.Marshal(map[string]any{"hits": hits}) // strings only: cannot fail
		method, path, body = http.MethodPost, "/v1/check", bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		panic(fmt.Sprintf("build request for %s: %v", base+path, err)) // our own URL; cannot happen
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

func keyPath(t target) string {
	if t.policy == "" {
		return t.client
	}
	return t.policy + "/" + t.client
}

// do performs one op and returns its record, plus one synthetic unknown
// op per extra time the transport wrote the request (see opRecord.Resent).
func (w *workload) do(abort context.Context, client int, kind checker.Kind, node nodeSpec, ts []target) []opRecord {
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
	req := request(httptrace.WithClientTrace(ctx, trace), kind, node.url(), ts)
	invoke := time.Since(w.cfg.t0).Nanoseconds()
	resp, err := w.hc.Do(req)
	var (
		status            int
		body              []byte
		servedBy, decided string
	)
	if err == nil {
		status = resp.StatusCode
		servedBy, decided = resp.Header.Get("X-Rlnode-Served-By"), resp.Header.Get("X-Rlnode-Decided")
		body, err = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}
	ret := time.Since(w.cfg.t0).Nanoseconds()

	rec := classify(kind, status, body, err, written.Load() > 0)
	label(&rec, client, kind, node, ts)
	rec.Invoke, rec.Return, rec.ServedBy = invoke, ret, servedBy
	if rec.Outcome == checker.OutcomeOK && kind == checker.KindHit {
		rec.Decided = decided
	}
	out := []opRecord{rec}
	// A response means the last attempt was written; every earlier
	// written attempt is a hit that may also have counted.
	extra := int(written.Load()) - 1
	if kind != checker.KindPeek {
		for range extra {
			r := opRecord{Resent: true}
			label(&r, client, kind, node, ts)
			r.Invoke, r.Return, r.Outcome = invoke, ret, checker.OutcomeUnknown
			r.Error = "the HTTP transport re-sent this request; an earlier attempt may have counted"
			out = append(out, r)
		}
	}
	return out
}

// label names the op's keys: the checker's key and policy, and for a
// multi-key check each hit's (in request order; classify filled in what
// came back for each).
func label(r *opRecord, client int, kind checker.Kind, node nodeSpec, ts []target) {
	r.Client, r.Kind, r.Node = client, kind, node.id
	r.Key, r.Policy = ts[0].key, ts[0].policy
	if kind != checker.KindMulti {
		return
	}
	r.Policy = ""
	if len(r.Parts) != len(ts) {
		if r.Outcome == checker.OutcomeOK {
			r.Outcome = checker.OutcomeUnknown
			r.Error = fmt.Sprintf("malformed answer: %d results for %d hits", len(r.Parts), len(ts))
		}
		r.Parts = make([]checker.Part, len(ts))
	}
	for i, t := range ts {
		r.Parts[i].Key, r.Parts[i].Policy = t.key, t.policy
	}
}

// classify turns what came back into an outcome. It is pure so the rules
// are unit-tested:
//   - 200/429 with a well-formed body: ok (a definite answer);
//   - 503 not_counted / no_leader / not_member / parent_unreachable (a
//     region without a slice; and not_leader for reads): fail, the op
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
		var b hitBody
		if err := json.Unmarshal(body, &b); err != nil || !b.wellFormed() || *b.Allowed != (status == http.StatusOK) {
			r.Outcome = checker.OutcomeUnknown
			r.Error = fmt.Sprintf("malformed %d body: %.200q", status, body)
			return r
		}
		p := b.part()
		r.Outcome, r.Allowed, r.Remaining, r.ResetAt, r.RetryAfterMs, r.Limits = checker.OutcomeOK, p.Allowed, p.Remaining, p.ResetAt, p.RetryAfterMs, p.Limits
		return r
	case kind == checker.KindMulti && (status == http.StatusOK || status == http.StatusTooManyRequests):
		var b struct {
			Allowed *bool     `json:"allowed"`
			Results []hitBody `json:"results"`
		}
		err := json.Unmarshal(body, &b)
		ok := err == nil && b.Allowed != nil && *b.Allowed == (status == http.StatusOK) && len(b.Results) > 0
		for _, h := range b.Results {
			if ok = ok && h.wellFormed(); ok {
				r.Parts = append(r.Parts, h.part())
			}
		}
		if !ok {
			r.Outcome, r.Parts = checker.OutcomeUnknown, nil
			r.Error = fmt.Sprintf("malformed %d body: %.200q", status, body)
			return r
		}
		r.Outcome, r.Allowed = checker.OutcomeOK, *b.Allowed
		return r
	case kind == checker.KindPeek && status == http.StatusOK:
		var b struct {
			WindowStart *int64 `json:"windowStart"`
			Used        *int64 `json:"used"`
			AppliedNow  *int64 `json:"appliedNow"`
			// A lapsed window reads as none; the checker wants what is
			// stored.
			LastWindowStart int64 `json:"lastWindowStart"`
			LastUsed        int64 `json:"lastUsed"`
		}
		if err := json.Unmarshal(body, &b); err != nil || b.WindowStart == nil || b.Used == nil || b.AppliedNow == nil {
			r.Outcome = checker.OutcomeUnknown
			r.Error = fmt.Sprintf("malformed 200 body: %.200q", body)
			return r
		}
		r.Outcome, r.WindowStart, r.Used, r.AppliedNow = checker.OutcomeOK, *b.WindowStart, *b.Used, *b.AppliedNow
		if b.LastWindowStart != 0 {
			r.WindowStart, r.Used = b.LastWindowStart, b.LastUsed
		}
		return r
	}
	var p struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	_ = json.Unmarshal(body, &p) // a body that is not a problem document leaves Code empty: unknown
	r.Code = p.Code
	r.Error = fmt.Sprintf("HTTP %d %s: %s", status, p.Code, p.Detail)
	if notApplied(kind, status, p.Code) {
		r.Outcome = outcomeFail
	} else {
		r.Outcome = checker.OutcomeUnknown
	}
	return r
}

// notApplied says an error answer certainly counted nothing: a 503 whose
// code says the node did not apply it (or, for a region, had no slice
// to decide from).
func notApplied(kind checker.Kind, status int, code string) bool {
	return status == http.StatusServiceUnavailable && (code == "not_counted" || code == "no_leader" || code == "not_member" ||
		code == "parent_unreachable" || kind == checker.KindPeek && code == "not_leader")
}

// hitBody is a check's answer: GET /check/... or one result of POST
// /v1/check.
type hitBody struct {
	Allowed      *bool                 `json:"allowed"`
	Remaining    *int64                `json:"remaining"`
	ResetAt      *int64                `json:"resetAt"`
	RetryAfterMs *int64                `json:"retryAfterMs"`
	Limits       []checker.LimitResult `json:"limits"`
}

func (b hitBody) wellFormed() bool { return b.Allowed != nil && b.Remaining != nil && b.ResetAt != nil }

func (b hitBody) part() checker.Part {
	p := checker.Part{Allowed: *b.Allowed, Remaining: *b.Remaining, ResetAt: *b.ResetAt, Limits: b.Limits}
	if b.RetryAfterMs != nil {
		p.RetryAfterMs = *b.RetryAfterMs
	}
	return p
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
