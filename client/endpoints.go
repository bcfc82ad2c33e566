package client

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// Endpoint health. A node that does not answer within Config.AttemptTimeout
// (a SIGSTOPped process, a machine that froze, a black-holed route: the
// kernel still accepts the connection and takes the request, and nothing
// comes back), or that refuses the connection, is marked down: calls skip
// it while any other node is up, and a probe owned by the Client asks its
// /livez every probeEvery until it answers; then it is up again. Without
// this, every call would spend its attempt budget on the hung node first,
// and a leader that hangs is first in the list.

// probeEvery is how often a down node is probed.
const probeEvery = 250 * time.Millisecond

// DefaultAttemptTimeout is Config.AttemptTimeout's default.
const DefaultAttemptTimeout = 300 * time.Millisecond

// health is the client's view of which nodes answer.
type health struct {
	mu     sync.Mutex
	down   map[string]time.Time // address -> since when
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup // the probes
}

func newHealth() *health { return &health{down: map[string]time.Time{}, stop: make(chan struct{})} }

// isDown reports whether addr is marked down.
func (h *health) isDown(addr string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, down := h.down[addr]
	return down
}

// anyDown is a cheap check for the common case: every node is up.
func (h *health) anyDown() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.down) > 0
}

// markUp records that addr answered.
func (h *health) markUp(addr string) {
	h.mu.Lock()
	delete(h.down, addr)
	h.mu.Unlock()
}

// markDown records that addr did not answer and starts its probe (one per
// node), unless the client is closed.
func (h *health) markDown(addr string, probe func(ctx context.Context, addr string) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, already := h.down[addr]; already || h.closed {
		return
	}
	h.down[addr] = time.Now()
	h.wg.Add(1)
	go h.probe(addr, probe)
}

// probe asks addr every probeEvery until it answers or the client closes.
func (h *health) probe(addr string, probe func(ctx context.Context, addr string) bool) {
	defer h.wg.Done()
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			// Close does not wait a probe's whole attempt budget.
			select {
			case <-h.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		ok := probe(ctx, addr)
		cancel()
		if ok {
			h.markUp(addr)
			return
		}
	}
}

// close stops the probes and waits for them.
func (h *health) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.stop)
	h.mu.Unlock()
	h.wg.Wait()
}

// probe reports whether addr answers /livez within the attempt budget
// (any HTTP answer will do: the node is not hung).
func (c *Client) probe(ctx context.Context, addr string) bool {
	ctx, cancel := c.attemptContext(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.scheme+"://"+addr+"/livez", nil)
	if err != nil {
		return false
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// attemptContext bounds one attempt on one node.
func (c *Client) attemptContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.cfg.AttemptTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.cfg.AttemptTimeout)
}

// candidates lists the nodes a call may try now, in order: the ones that
// are up (the one that last answered first), else, when every node not yet
// ruled out is down, the down ones (one of them may be back before its
// probe noticed). Nodes in answered are ruled out for this call.
func (c *Client) candidates(answered map[string]error) []string {
	members := c.order()
	if !c.health.anyDown() && len(answered) == 0 {
		return members
	}
	var up, down []string
	for _, m := range members {
		switch {
		case answered[m] != nil:
		case c.health.isDown(m):
			down = append(down, m)
		default:
			up = append(up, m)
		}
	}
	if len(up) > 0 {
		return up
	}
	return down
}
