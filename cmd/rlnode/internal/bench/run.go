package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// requestTimeout bounds every request, so that a hung node costs a worker at
// most this long and Run always ends within Duration+Warmup+requestTimeout.
const requestTimeout = 5 * time.Second

// Run executes the benchmark described by cfg and returns its result.
//
// The run lasts Warmup+Duration; only requests whose (intended) send time
// falls after the warmup are recorded. Requests still in flight when the
// time is up are allowed to finish (bounded by the 5s request timeout) and
// are counted. If ctx is cancelled, in-flight requests are aborted and not
// counted, and Run returns what was measured so far with Interrupted set and
// a nil error. Run returns only after every goroutine it started has exited.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	r, err := newRunner(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer r.transport.CloseIdleConnections()

	stopProgress := func() {}
	if cfg.Progress != nil {
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			r.progress(stop)
		}()
		stopProgress = func() { close(stop); <-done }
	}

	var wg sync.WaitGroup
	var dropped int64
	if cfg.Rate > 0 {
		dropped = r.schedule(&wg)
	} else {
		for i := range cfg.Concurrency {
			w := r.newWorker(i)
			wg.Go(w.runClosed)
		}
	}
	wg.Wait()
	stopProgress()

	measured := min(time.Since(r.start), r.end) - r.warmupEnd
	return r.result(max(measured, 0), dropped), nil
}

// runner is what all workers of one Run share. It is read-only once the
// run starts, apart from the atomic progress counters and the merged stats.
type runner struct {
	cfg       Config
	ctx       context.Context // the caller's: cancelling it aborts in-flight requests
	transport *http.Transport
	client    *http.Client
	templates []*http.Request // one per address; workers clone and then reuse them
	path      pattern
	query     pattern
	keyed     bool // the path or query contains {key}

	start     time.Time
	warmupEnd time.Duration // offset from start at which recording begins
	end       time.Duration // offset from start after which nothing new is sent

	// Progress counters, updated only when cfg.Progress is set.
	done, failed atomic.Int64

	mu    sync.Mutex
	total stats // workers' stats, merged as each worker exits
}

func newRunner(ctx context.Context, cfg Config) (*runner, error) {
	tr := &http.Transport{
		Proxy:               nil, // a benchmark must reach the nodes directly, whatever the environment says
		DialContext:         (&net.Dialer{Timeout: requestTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0, // no global cap; the per-host cap below is what matters
		MaxIdleConnsPerHost: cfg.Concurrency,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // bodies are tiny; gzip would only burn the CPU we share with the server
		TLSClientConfig:     cfg.TLS,
	}
	r := &runner{
		cfg:       cfg,
		ctx:       ctx,
		transport: tr,
		client: &http.Client{
			Transport: tr,
			Timeout:   requestTimeout,
			// A redirect is not an answer from the rate limiter; count it as an error.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		warmupEnd: cfg.Warmup,
		end:       cfg.Warmup + cfg.Duration,
	}
	rawPath, rawQuery, _ := strings.Cut(cfg.Path, "?")
	r.path, r.query = newPattern(rawPath), newPattern(rawQuery)
	r.keyed = r.path.keyed() || r.query.keyed()
	for _, a := range cfg.Addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(a, "/"), nil)
		if err != nil {
			return nil, fmt.Errorf("bench: build request for %s: %w", a, err)
		}
		// Set the path unescaped: keys are alphanumeric, and the template
		// may contain characters (like {}) that url.Parse would mangle.
		req.URL.Path, _ = r.path.expand(nil, 0)
		req.URL.RawQuery, _ = r.query.expand(nil, 0)
		req.Header.Set("User-Agent", "rlnode-bench")
		if cfg.Token != "" {
			req.Header.Set("Authorization", "Bearer "+cfg.Token)
		}
		r.templates = append(r.templates, req)
	}
	r.start = time.Now()
	return r, nil
}

// schedule is the open-loop scheduler. It runs in Run's goroutine, emits
// intended send times (offsets from start) at cfg.Rate, hands each to an
// idle worker, starts a new worker when none is idle and the in-flight cap
// allows, and otherwise drops the request and counts it. Dropping instead
// of queueing keeps the offered load honest: the client never silently
// falls behind the schedule. It returns the number of dropped requests
// that would have been recorded.
func (r *runner) schedule(wg *sync.WaitGroup) (dropped int64) {
	work := make(chan time.Duration) // unbuffered: a send succeeds only if a worker is idle
	defer close(work)                // lets the workers drain out once the schedule is over

	interval := float64(time.Second) / r.cfg.Rate
	at := func(i int64) time.Duration { return time.Duration(float64(i) * interval) }
	n := int64(math.Ceil(float64(r.end) / interval)) // requests intended in [0, end)

	done := r.ctx.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	workers := 0
	for i := int64(0); i < n; {
		select {
		case <-done:
			return dropped
		default:
		}
		// Emit everything that is due. Timers are coarser than the interval
		// at high rates, so a batch per wake-up is normal; each request still
		// carries its own exact intended time.
		now := time.Since(r.start)
		for ; i < n && at(i) <= now; i++ {
			t := at(i)
			select {
			case work <- t:
				continue
			default:
			}
			if workers < r.cfg.Concurrency {
				w := r.newWorker(workers)
				workers++
				wg.Go(func() { w.runOpen(t, work) })
				continue
			}
			if t >= r.warmupEnd {
				dropped++
			}
		}
		if i >= n {
			break
		}
		timer.Reset(at(i) - now)
		select {
		case <-done:
			return dropped
		case <-timer.C:
		}
	}
	return dropped
}

// progress rewrites one status line on cfg.Progress every 500ms until stop
// is closed, then erases it so the final report starts on a clean line.
func (r *runner) progress(stop <-chan struct{}) {
	w := r.cfg.Progress
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	lastN, lastT, width := int64(0), r.start, 0
	for {
		select {
		case <-stop:
			fmt.Fprintf(w, "\r%s\r", strings.Repeat(" ", width))
			return
		case now := <-tick.C:
			n := r.done.Load()
			rps := float64(n-lastN) / now.Sub(lastT).Seconds()
			lastN, lastT = n, now
			elapsed := now.Sub(r.start)
			phase := "bench "
			if elapsed < r.warmupEnd {
				phase = "warmup"
			}
			line := fmt.Sprintf("%s %6.1fs / %.0fs  %9.0f req/s  %d errors",
				phase, elapsed.Seconds(), r.end.Seconds(), rps, r.failed.Load())
			width = max(width, len(line))
			fmt.Fprintf(w, "\r%-*s", width, line)
		}
	}
}

func (r *runner) collect(s *stats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total.merge(s)
}

// outcome classifies one request.
type outcome int

const (
	outcomeOK      outcome = iota // any 2xx: the service allowed the request
	outcomeRefused                // 429: the service decided to refuse it
	outcomeError                  // transport failure or any other status
)

// stats is one worker's private tally; merging happens once, at exit.
type stats struct {
	ok, refused, errors int64
	kinds               map[string]int64
	hist                histogram // latency of decided (2xx and 429) requests
	trace               trace     // per second, when Config.Trace
}

func (s *stats) add(o outcome, kind string, latency time.Duration) {
	switch o {
	case outcomeOK:
		s.ok++
		s.hist.record(latency)
	case outcomeRefused:
		s.refused++
		s.hist.record(latency)
	default:
		s.errors++
		if s.kinds == nil {
			s.kinds = make(map[string]int64)
		}
		s.kinds[kind]++
	}
}

func (s *stats) merge(o *stats) {
	s.ok += o.ok
	s.refused += o.refused
	s.errors += o.errors
	for k, v := range o.kinds {
		if s.kinds == nil {
			s.kinds = make(map[string]int64)
		}
		s.kinds[k] += v
	}
	s.hist.merge(&o.hist)
	s.trace.merge(&o.trace)
}

// worker sends requests one at a time. Everything it mutates is its own,
// so the hot path takes no locks.
type worker struct {
	r    *runner
	rng  *rand.Rand
	zipf *rand.Zipf
	reqs []*http.Request // per address, reused once the previous response body is closed
	next int             // round-robin position over the addresses
	buf  []byte          // scratch for building paths
	st   stats
}

func (r *runner) newWorker(id int) *worker {
	rng := rand.New(rand.NewPCG(rand.Uint64(), uint64(id)))
	w := &worker{
		r:    r,
		rng:  rng,
		reqs: make([]*http.Request, len(r.templates)),
		next: id % len(r.templates), // so workers don't all start on the first node
	}
	if r.cfg.Dist == "zipf" && r.cfg.Keys > 1 {
		w.zipf = rand.NewZipf(rng, 1.1, 1, uint64(r.cfg.Keys-1))
	}
	return w
}

func (w *worker) runClosed() {
	defer w.r.collect(&w.st)
	done := w.r.ctx.Done()
	for {
		select {
		case <-done:
			return
		default:
		}
		now := time.Since(w.r.start)
		if now >= w.r.end {
			return
		}
		w.hit(now) // closed loop: the intended time is the actual send time
	}
}

func (w *worker) runOpen(first time.Duration, work <-chan time.Duration) {
	defer w.r.collect(&w.st)
	w.hit(first)
	for t := range work {
		w.hit(t)
	}
}

func (w *worker) key() int {
	if w.zipf != nil {
		return int(w.zipf.Uint64())
	}
	return w.rng.IntN(w.r.cfg.Keys)
}

// hit sends one request whose intended send time is the offset intended
// from the run's start, and records it if that time is past the warmup.
func (w *worker) hit(intended time.Duration) {
	i := w.next
	w.next = (w.next + 1) % len(w.reqs)
	req := w.reqs[i]
	if req == nil {
		req = w.r.templates[i].Clone(w.r.ctx)
		w.reqs[i] = req
	}
	if w.r.keyed {
		k := w.key()
		if w.r.path.keyed() {
			req.URL.Path, w.buf = w.r.path.expand(w.buf[:0], k)
		}
		if w.r.query.keyed() {
			req.URL.RawQuery, w.buf = w.r.query.expand(w.buf[:0], k)
		}
	}

	o, kind := outcomeError, ""
	resp, err := w.r.client.Do(req)
	if err == nil {
		o, kind, err = drain(resp)
	}
	latency := time.Since(w.r.start) - intended
	if err != nil {
		// After a failure the transport may still be writing the request
		// in another goroutine, so it must not be mutated again.
		w.reqs[i] = nil
		if w.r.ctx.Err() != nil {
			return // aborted by our caller: says nothing about the server
		}
		o, kind = outcomeError, errorKind(err)
	}
	if w.r.cfg.Progress != nil {
		w.r.done.Add(1)
		if o == outcomeError {
			w.r.failed.Add(1)
		}
	}
	if intended >= w.r.warmupEnd {
		w.st.add(o, kind, latency)
		if w.r.cfg.Trace {
			w.st.trace.add(intended-w.r.warmupEnd, o == outcomeError, latency)
		}
	}
}

// drain reads the response body to the end and closes it, so the
// keep-alive connection goes back to the pool. The status code alone
// decides allowed/refused; only error bodies are looked at, to pick up the
// problem "code" (e.g. 503 no_leader vs outcome_unknown).
func drain(resp *http.Response) (outcome, string, error) {
	defer resp.Body.Close()
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		_, err := io.Copy(io.Discard, resp.Body)
		return outcomeOK, "", err
	case code == http.StatusTooManyRequests:
		_, err := io.Copy(io.Discard, resp.Body)
		return outcomeRefused, "", err
	default:
		kind := strconv.Itoa(code)
		head, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
		}
		if c := problemCode(head); c != "" {
			kind += ":" + c
		}
		return outcomeError, kind, err
	}
}

// problemCode extracts the "code" member of a problem+json body. Only
// short lower-case identifiers are accepted, so a misbehaving server cannot
// blow up the number of distinct error kinds.
func problemCode(body []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(body, &p) != nil || p.Code == "" || len(p.Code) > 32 {
		return ""
	}
	for _, c := range p.Code {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return ""
		}
	}
	return p.Code
}

// errorKind names a transport error coarsely enough to aggregate.
func errorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "conn_refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "conn_reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "conn_closed"
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return "conn"
	}
	return "other"
}

// pattern is a path or query template split at its "{key}" placeholders.
type pattern []string

func newPattern(s string) pattern { return strings.Split(s, "{key}") }

func (p pattern) keyed() bool { return len(p) > 1 }

// expand substitutes key for every placeholder, building in buf and
// returning it for reuse; the one allocation left is the final string.
func (p pattern) expand(buf []byte, key int) (string, []byte) {
	if !p.keyed() {
		return p[0], buf
	}
	buf = append(buf, p[0]...)
	for _, part := range p[1:] {
		buf = appendKey(buf, key)
		buf = append(buf, part...)
	}
	return string(buf), buf
}

// appendKey appends the client id for key k: "c" and 15 zero-padded
// digits, so every id is exactly 16 bytes whatever the key count.
func appendKey(dst []byte, k int) []byte {
	var d [16]byte
	d[0] = 'c'
	for i := 15; i > 0; i-- {
		d[i] = byte('0' + k%10)
		k /= 10
	}
	return append(dst, d[:]...)
}
