package topkeys

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config sizes a Recorder. Zero fields take the defaults.
type Config struct {
	// K is the counters per summary (default 128): a count overstates by
	// at most the policy's hits in a bucket / K.
	K int
	// Bucket is how long one ring bucket collects (default 10s) and
	// Buckets how many are kept (default 6): the window is the current
	// bucket and the Buckets-1 before it, so 50 to 60 s by default.
	Bucket  time.Duration
	Buckets int
	// Queue is the hand-off buffer (default 16384 hits); hits arriving
	// while it is full are dropped and counted (Report.Dropped).
	Queue int
	// MaxPolicies bounds the policies one bucket tracks (default 4096).
	MaxPolicies int
	// HistoryStep, HistorySteps and HistoryPolicies size the rate history
	// (history.go; defaults 5 s, 120, 64): hits per policy and outcome per
	// step, kept HistorySteps steps, at most HistoryPolicies policies a
	// step. It is at most HistorySteps*HistoryPolicies counters of 24
	// bytes (about 180 KiB by default).
	HistoryStep     time.Duration
	HistorySteps    int
	HistoryPolicies int
}

func (c *Config) defaults() {
	if c.K <= 0 {
		c.K = 128
	}
	if c.Bucket <= 0 {
		c.Bucket = 10 * time.Second
	}
	if c.Buckets <= 0 {
		c.Buckets = 6
	}
	if c.Queue <= 0 {
		c.Queue = 16384
	}
	if c.MaxPolicies <= 0 {
		c.MaxPolicies = 4096
	}
	if c.HistoryStep < time.Millisecond {
		c.HistoryStep = DefaultHistoryStep
	}
	if c.HistorySteps <= 0 {
		c.HistorySteps = DefaultHistorySteps
	}
	if c.HistoryPolicies <= 0 {
		c.HistoryPolicies = DefaultHistoryPolicies
	}
}

// Outcome is what a recorded hit got; each has its own summaries.
type Outcome uint8

const (
	Allowed Outcome = iota
	Refused
	// WouldRefuse: a shadow policy let through a hit enforcing would
	// have refused.
	WouldRefuse
	outcomes
)

// hit is what the hot path hands over: two strings the caller already has
// and an outcome, copied into the channel's buffer without allocating.
type hit struct {
	policy, client string
	outcome        Outcome
}

type bucket struct {
	start    time.Time
	policies map[string]*[outcomes]*summary // by Outcome
}

// Recorder keeps the top keys per policy and outcome over a sliding
// window. Record is the hot path: a non-blocking send on a buffered channel
// (no lock of ours, no allocation); one owner goroutine drains it into the
// summaries. Readers and the owner share a mutex, which the hot path never
// takes.
type Recorder struct {
	cfg     Config
	ch      chan hit
	dropped atomic.Uint64
	now     func() time.Time

	mu   sync.Mutex
	ring []bucket
	cur  int
	hist []histStep // by step number modulo its length (history.go)
	// histDropped counts hits left out of the history by its policy bound.
	histDropped uint64

	stop chan struct{}
	done chan struct{}
}

// New starts a Recorder; Close stops its goroutine.
func New(cfg Config) *Recorder {
	return newRecorder(cfg, time.Now)
}

func newRecorder(cfg Config, now func() time.Time) *Recorder {
	cfg.defaults()
	r := &Recorder{cfg: cfg, ch: make(chan hit, cfg.Queue), now: now,
		ring: make([]bucket, cfg.Buckets), hist: make([]histStep, cfg.HistorySteps), stop: make(chan struct{}), done: make(chan struct{})}
	r.ring[0] = bucket{start: now(), policies: map[string]*[outcomes]*summary{}}
	go r.run()
	return r
}

// Close stops the owner goroutine and waits for it.
func (r *Recorder) Close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}

// Record counts one decided hit. It never blocks: when the owner falls
// behind, the hit is dropped and counted.
func (r *Recorder) Record(policy, client string, o Outcome) {
	if o >= outcomes {
		return
	}
	select {
	case r.ch <- hit{policy: policy, client: client, outcome: o}:
	default:
		r.dropped.Add(1)
	}
}

func (r *Recorder) run() {
	defer close(r.done)
	t := time.NewTicker(r.cfg.Bucket)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.rotate()
		case h := <-r.ch:
			r.drain(h)
		}
	}
}

// drain counts h and whatever else is queued (up to a bound, so readers
// are not kept waiting) under one lock.
func (r *Recorder) drain(h hit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	nowMs := r.now().UnixMilli() // one reading for the batch
	r.count(h, nowMs)
	for i := 0; i < 4096; i++ {
		select {
		case h = <-r.ch:
			r.count(h, nowMs)
		default:
			return
		}
	}
}

func (r *Recorder) count(h hit, nowMs int64) {
	r.histCount(h, nowMs)
	b := &r.ring[r.cur]
	s := b.policies[h.policy]
	if s == nil {
		if len(b.policies) >= r.cfg.MaxPolicies {
			r.dropped.Add(1)
			return
		}
		s = &[outcomes]*summary{newSummary(r.cfg.K), newSummary(r.cfg.K), newSummary(r.cfg.K)}
		b.policies[h.policy] = s
	}
	s[h.outcome].add(h.client)
}

func (r *Recorder) rotate() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur = (r.cur + 1) % len(r.ring)
	r.ring[r.cur] = bucket{start: r.now(), policies: map[string]*[outcomes]*summary{}}
}

// PolicyTop is the top keys of one policy, by outcome.
type PolicyTop struct {
	Policy  string `json:"policy"`
	Allowed List   `json:"allowed"`
	Refused List   `json:"refused"`
	// WouldRefuse: hits a shadow policy let through that enforcing would
	// have refused (absent from Allowed and Refused).
	WouldRefuse List `json:"wouldRefuse"`
}

// Report is one node's (or, merged, the cluster's) top keys.
type Report struct {
	// WindowMs is how far back the counts reach.
	WindowMs int64       `json:"windowMs"`
	K        int         `json:"k"`
	Dropped  uint64      `json:"dropped"`
	Policies []PolicyTop `json:"policies"`
	// History is the hits per policy per step over the last minutes
	// (history.go), when asked for.
	History []PolicyHistory `json:"history,omitempty"`
}

// Top reports the window's top n keys (all the summaries hold when n <= 0)
// of policy, or of every policy when policy is "".
func (r *Recorder) Top(policy string, n int) Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	oldest := now
	per := map[string][outcomes][]List{}
	for _, b := range r.ring {
		if b.policies == nil || now.Sub(b.start) >= time.Duration(len(r.ring))*r.cfg.Bucket {
			continue
		}
		if b.start.Before(oldest) {
			oldest = b.start
		}
		for name, s := range b.policies {
			if policy != "" && name != policy {
				continue
			}
			l := per[name]
			for o := range l {
				l[o] = append(l[o], s[o].list())
			}
			per[name] = l
		}
	}
	rep := Report{WindowMs: now.Sub(oldest).Milliseconds(), K: r.cfg.K, Dropped: r.dropped.Load(), Policies: []PolicyTop{}}
	for name, l := range per {
		rep.Policies = append(rep.Policies, policyTop(name, n, l))
	}
	sortPolicies(rep.Policies)
	return rep
}

// MergeReports adds up several nodes' reports (their hits are disjoint:
// each hit is recorded by the node a client asked) and keeps n keys per
// list.
func MergeReports(n int, reps ...Report) Report {
	out := Report{Policies: []PolicyTop{}}
	per := map[string][outcomes][]List{}
	var hs [][]PolicyHistory
	for _, r := range reps {
		hs = append(hs, r.History)
		out.WindowMs = max(out.WindowMs, r.WindowMs)
		out.K = max(out.K, r.K)
		out.Dropped += r.Dropped
		for _, p := range r.Policies {
			l := per[p.Policy]
			l[Allowed] = append(l[Allowed], p.Allowed)
			l[Refused] = append(l[Refused], p.Refused)
			l[WouldRefuse] = append(l[WouldRefuse], p.WouldRefuse)
			per[p.Policy] = l
		}
	}
	for name, l := range per {
		out.Policies = append(out.Policies, policyTop(name, n, l))
	}
	sortPolicies(out.Policies)
	if h := MergeHistories(hs...); len(h) > 0 {
		out.History = h
	}
	return out
}

func policyTop(name string, n int, l [outcomes][]List) PolicyTop {
	return PolicyTop{Policy: name, Allowed: Merge(n, l[Allowed]...), Refused: Merge(n, l[Refused]...), WouldRefuse: Merge(n, l[WouldRefuse]...)}
}

func sortPolicies(ps []PolicyTop) {
	slices.SortFunc(ps, func(a, b PolicyTop) int { return strings.Compare(a.Policy, b.Policy) })
}
