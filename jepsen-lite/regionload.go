package main

import (
	"context"
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

// regionTarget is where one share of the multi-cluster demand goes: the
// nodes of one region (or of the parent) and the hits per second they
// get together.
type regionTarget struct {
	region  string
	nodes   []nodeSpec
	rate    float64 // mean hits per second
	workers int
	// holders is how many of the workers are application holders
	// (regionholders.go): they decide the fixed-window keys' hits
	// in-process through client.Local against these nodes.
	holders int
	// period is this target's busy/quiet cycle (0: steady demand).
	period time.Duration
	// burst, when positive, is a burst of hits per key sent at once
	// burstDelay after each global window the target's answers named
	// ends (the demand shape "burst"; rate is then the trickle between
	// bursts).
	burst int
}

// burstDelay is how long after a window's end a burst goes out: by then
// the other region's demand has opened the next window at the parent.
const burstDelay = 500 * time.Millisecond

// busyFactor and quietFactor shape each target's demand: busy for half
// of its period at 1.75x its mean rate, then quiet at 0.25x. The regions'
// periods differ (b's is the golden ratio times a's), so the total
// demand wanders between well under the limit and well over it, and the
// turns drift across window ends. That is what a broken region needs to
// be seen: a window that ends with units lent to a region and not spent
// (a correct region lets them expire), followed by one that the demand
// fills: a broken region spends the old units in it, and the total goes
// over the limit.
const (
	busyFactor  = 1.75
	quietFactor = 0.25
)

// rateAt is target t's demand at elapsed since the load started.
func (t regionTarget) rateAt(elapsed time.Duration) float64 {
	if t.period <= 0 {
		return t.rate
	}
	if (elapsed/(t.period/2))%2 == 0 {
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
	keys    []loadKey
	timeout time.Duration
	seed    uint64
	hc      *http.Client
	began   time.Time

	stopCh   chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	mu       sync.Mutex
	recs     []regionRecord
	// lastReset is, per target and key, the latest window end an answer
	// named (bursts follow it).
	lastReset map[[2]string]int64
}

// loadKey is one key the load hits: its policy, and its share of the
// hits (weight, relative to the other keys'). Bursts go to fixed-window
// keys only (they follow the windows the answers name).
type loadKey struct {
	policy, key string
	weight      float64
	bursts      bool
}

func (k loadKey) String() string { return k.policy + "/" + k.key }

func newRegionLoad(targets []regionTarget, keys []loadKey, timeout time.Duration, seed uint64) *regionLoad {
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
	return &regionLoad{targets: targets, keys: keys, timeout: timeout, seed: seed,
		hc: &http.Client{Transport: tr}, stopCh: make(chan struct{}), lastReset: map[[2]string]int64{}}
}

// start launches the workers; it fails (having launched none) when an
// application holder cannot be made.
func (l *regionLoad) start(abort context.Context) error {
	var holders [][]*regionHolder
	for _, t := range l.targets {
		var hs []*regionHolder
		for i := range min(t.holders, t.workers) {
			h, err := newRegionHolder(fmt.Sprintf("app-%s%d", t.region, i+1), t.nodes, l.timeout, l.hc.Transport)
			if err != nil {
				for _, made := range slices.Concat(append(holders, hs)...) {
					made.close()
				}
				return err
			}
			hs = append(hs, h)
		}
		holders = append(holders, hs)
	}
	l.began = time.Now()
	n := 0
	for k, t := range l.targets {
		for i := range t.workers {
			n++
			var h *regionHolder // owned by its worker, which closes it
			if i < len(holders[k]) {
				h = holders[k][i]
			}
			l.wg.Go(func() { l.worker(abort, t, uint64(n), h) })
		}
		if t.burst > 0 {
			for _, key := range l.keys {
				if key.bursts {
					n++
					l.wg.Go(func() { l.burster(abort, t, key, uint64(n)) })
				}
			}
		}
	}
	return nil
}

// burster sends t.burst hits of key at once, at the start and then
// burstDelay after each window end the target's answers named.
func (l *regionLoad) burster(abort context.Context, t regionTarget, key loadKey, id uint64) {
	rng := rand.New(rand.NewPCG(l.seed, id))
	var done int64 = -1
	for {
		l.mu.Lock()
		end := l.lastReset[[2]string{t.region, key.String()}]
		l.mu.Unlock()
		if done < 0 || end > done && time.Now().After(time.UnixMilli(end).Add(burstDelay)) {
			done = end
			var wg sync.WaitGroup
			const parallel = 8
			for range parallel {
				node := t.nodes[rng.IntN(len(t.nodes))]
				wg.Go(func() {
					for range t.burst / parallel {
						l.record(l.hit(abort, t.region, node, key))
					}
				})
			}
			wg.Wait()
		}
		select {
		case <-l.stopCh:
			return
		case <-abort.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// record keeps recs and follows the latest window end they name.
func (l *regionLoad) record(recs []regionRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range recs {
		k := [2]string{r.Region, r.Policy + "/" + r.Key}
		if r.ResetAt > l.lastReset[k] {
			l.lastReset[k] = r.ResetAt
		}
	}
	l.recs = append(l.recs, recs...)
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

// worker sends t's hits, closed-loop; with a holder h, it decides the
// fixed-window keys' hits through h (the other keys' over HTTP) and
// closes h when it stops.
func (l *regionLoad) worker(abort context.Context, t regionTarget, id uint64, h *regionHolder) {
	rng := rand.New(rand.NewPCG(l.seed, id))
	if h != nil {
		defer h.close()
	}
	for {
		mean := float64(time.Second) * float64(t.workers) / t.rateAt(time.Since(l.began))
		select {
		case <-l.stopCh:
			return
		case <-abort.Done():
			return
		case <-time.After(time.Duration(rng.ExpFloat64() * mean)):
		}
		node := t.nodes[rng.IntN(len(t.nodes))]
		key := l.pick(rng)
		if h != nil && key.policy == globalPolicy {
			l.record([]regionRecord{h.hit(abort, t.region, key, l.timeout)})
			continue
		}
		l.record(l.hit(abort, t.region, node, key))
	}
}

// hit sends one check and records it; an earlier attempt Go's transport
// wrote and then re-sent becomes a synthetic unknown record.
// pick draws a key by weight.
func (l *regionLoad) pick(rng *rand.Rand) loadKey {
	total := 0.0
	for _, k := range l.keys {
		total += k.weight
	}
	x := rng.Float64() * total
	for _, k := range l.keys {
		if x -= k.weight; x < 0 {
			return k
		}
	}
	return l.keys[len(l.keys)-1]
}

func (l *regionLoad) hit(abort context.Context, region string, node nodeSpec, key loadKey) []regionRecord {
	var written atomic.Int32
	trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			written.Add(1)
		}
	}}
	ctx, cancel := context.WithTimeout(abort, l.timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet,
		node.url()+"/check/"+key.policy+"/"+key.key, nil)
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
	rec := regionRecord{Region: region, Node: node.id, Policy: key.policy, Key: key.key, Sent: sent.UnixNano(), Recv: recv.UnixNano(),
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
