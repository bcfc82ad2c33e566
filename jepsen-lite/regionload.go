package main

import (
	"context"
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

// regionTarget is where one share of the multi-cluster demand goes: the
// nodes of one region (or of the parent) and the hits per second they
// get together.
type regionTarget struct {
	region  string
	nodes   []nodeSpec
	rate    float64 // mean hits per second
	workers int
	// antiphase puts this target's busy half-periods where the others'
	// quiet ones are.
	antiphase bool
}

// busyFactor and quietFactor shape each target's demand: busy for half
// of --demand-period at 1.6x its mean rate, then quiet at 0.4x, regions
// in antiphase. A region that turns quiet holds units its demand no
// longer spends quickly; when a window ends then, a correct region lets
// them expire and a broken one spends them in the next window, which the
// other, busy, region fills: the total goes over the limit. The period
// is not a multiple of the window, so the turns drift across window ends.
const (
	busyFactor  = 1.6
	quietFactor = 0.4
)

// rateAt is target t's demand at elapsed since the load started.
func (t regionTarget) rateAt(elapsed, period time.Duration) float64 {
	if period <= 0 {
		return t.rate
	}
	busy := (elapsed/(period/2))%2 == 0
	if t.antiphase {
		busy = !busy
	}
	if busy {
		return t.rate * busyFactor
	}
	return t.rate * quietFactor
}

// regionLoad drives the global policy's keys from every target. Each
// worker is closed-loop with an exponential think time, so a target's
// workers together aim at its rate; a hit goes to a random node of the
// target (a killed or paused one too: callers do not know). start
// launches; stop (called by the owner, the region runner) lets in-flight
// hits finish and returns every record sorted by send time.
type regionLoad struct {
	targets []regionTarget
	policy  string
	keys    []string
	timeout time.Duration
	seed    uint64
	period  time.Duration // of the busy/quiet demand; 0: steady
	hc      *http.Client
	began   time.Time

	stopCh   chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	mu       sync.Mutex
	recs     []regionRecord
}

func newRegionLoad(targets []regionTarget, policy string, keys []string, timeout, period time.Duration, seed uint64) *regionLoad {
	workers := 0
	for _, t := range targets {
		workers += t.workers
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: timeout, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConns:        workers * 4,
		MaxIdleConnsPerHost: workers,
		IdleConnTimeout:     60 * time.Second,
		DisableCompression:  true,
	}
	return &regionLoad{targets: targets, policy: policy, keys: keys, timeout: timeout, period: period, seed: seed,
		hc: &http.Client{Transport: tr}, stopCh: make(chan struct{})}
}

func (l *regionLoad) start(abort context.Context) {
	l.began = time.Now()
	n := 0
	for _, t := range l.targets {
		for range t.workers {
			n++
			l.wg.Go(func() { l.worker(abort, t, uint64(n)) })
		}
	}
}

func (l *regionLoad) stop() []regionRecord {
	l.stopOnce.Do(func() {
		close(l.stopCh)
		l.wg.Wait()
		l.hc.CloseIdleConnections()
		slices.SortStableFunc(l.recs, func(a, b regionRecord) int {
			switch {
			case a.Sent < b.Sent:
				return -1
			case a.Sent > b.Sent:
				return 1
			}
			return 0
		})
	})
	return l.recs
}

func (l *regionLoad) worker(abort context.Context, t regionTarget, id uint64) {
	rng := rand.New(rand.NewPCG(l.seed, id))
	for {
		mean := float64(time.Second) * float64(t.workers) / t.rateAt(time.Since(l.began), l.period)
		select {
		case <-l.stopCh:
			return
		case <-abort.Done():
			return
		case <-time.After(time.Duration(rng.ExpFloat64() * mean)):
		}
		node := t.nodes[rng.IntN(len(t.nodes))]
		key := l.keys[rng.IntN(len(l.keys))]
		recs := l.hit(abort, t.region, node, key)
		l.mu.Lock()
		l.recs = append(l.recs, recs...)
		l.mu.Unlock()
	}
}

// hit sends one check and records it; an earlier attempt Go's transport
// wrote and then re-sent becomes a synthetic unknown record.
func (l *regionLoad) hit(abort context.Context, region string, node nodeSpec, key string) []regionRecord {
	var written atomic.Int32
	trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			written.Add(1)
		}
	}}
	ctx, cancel := context.WithTimeout(abort, l.timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet,
		node.url()+"/check/"+l.policy+"/"+key, nil)
	sent := time.Now()
	resp, err := l.hc.Do(req)
	var status int
	var body []byte
	if err == nil {
		status = resp.StatusCode
		body, err = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}
	recv := time.Now()
	c := classify(checker.KindHit, status, body, err, written.Load() > 0)
	rec := regionRecord{Region: region, Node: node.id, Key: key, Sent: sent.UnixNano(), Recv: recv.UnixNano(),
		Outcome: c.Outcome, Status: status, Code: c.Code, Allowed: c.Outcome == checker.OutcomeOK && c.Allowed,
		ResetAt: c.ResetAt, Error: c.Error}
	out := []regionRecord{rec}
	for range int(written.Load()) - 1 {
		r := rec
		r.Outcome, r.Status, r.Code, r.Allowed, r.ResetAt, r.Resent = checker.OutcomeUnknown, 0, "", false, 0, true
		r.Error = "the HTTP transport re-sent this request; an earlier attempt may have counted"
		out = append(out, r)
	}
	return out
}
