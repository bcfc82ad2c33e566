package proctest

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/testprog"
)

// A long process test says what it is doing every HeartbeatEvery (or
// $RLNODE_TEST_HEARTBEAT, a Go duration), through testprog.Say: on the
// terminal, or into the file .ci/run's progress printer follows, while go
// test still holds the package's output. The step is the last thing the
// test did through this package (started, killed, signalled a process,
// waited for one).
const HeartbeatEvery = 30 * time.Second

type progress struct {
	start time.Time
	mu    sync.Mutex
	step  string
}

// progressOf maps a running long test to its progress.
var progressOf sync.Map // testing.TB -> *progress

func heartbeat(t testing.TB) {
	p := &progress{start: time.Now(), step: "starting"}
	progressOf.Store(t, p)
	stop := every(heartbeatEvery(), func() {
		p.mu.Lock()
		step := p.step
		p.mu.Unlock()
		testprog.Say(fmt.Sprintf("... %s: running for %s; last step: %s", t.Name(), time.Since(p.start).Round(time.Second), step))
	})
	t.Cleanup(func() {
		stop()
		progressOf.Delete(t)
	})
}

// every calls say each period until stop, which waits for it to end.
func every(period time.Duration, say func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				say()
			}
		}
	}()
	return func() { close(quit); <-done }
}

// heartbeatEvery is HeartbeatEvery, or $RLNODE_TEST_HEARTBEAT.
func heartbeatEvery() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("RLNODE_TEST_HEARTBEAT")); err == nil && d > 0 {
		return d
	}
	return HeartbeatEvery
}

// note records what a long test is doing now.
func note(t testing.TB, format string, args ...any) {
	v, ok := progressOf.Load(t)
	if !ok {
		return
	}
	p := v.(*progress)
	p.mu.Lock()
	p.step = fmt.Sprintf(format, args...) + fmt.Sprintf(" (at %s)", time.Since(p.start).Round(time.Second))
	p.mu.Unlock()
}
