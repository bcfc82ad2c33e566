package cluster

import (
	"fmt"
	"sync"
	"time"
)

// A follower that hears the leader's heartbeats but whose log stays far
// behind (a disk too slow for the load) would answer reads only stale and
// forward everything else, yet looked ready. It is not ready once its log
// has been more than MaxFollowerLag entries behind the leader's for
// FollowerLagGrace.
const (
	MaxFollowerLag   = 512
	FollowerLagGrace = 5 * time.Second
	lagCheckEvery    = 2 * time.Second
)

// lagWatch remembers since when this node's log has been far behind the
// leader's.
type lagWatch struct {
	mu     sync.Mutex
	since  time.Time // zero while within MaxFollowerLag
	behind uint64
}

// observe records one comparison of the leader's last log index with this
// node's.
func (w *lagWatch) observe(now time.Time, leaderLast, ownLast uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if leaderLast <= ownLast+MaxFollowerLag {
		w.since, w.behind = time.Time{}, 0
		return
	}
	if w.since.IsZero() {
		w.since = now
	}
	w.behind = leaderLast - ownLast
}

// tooFar says why the node is not ready, or nil while it is within the lag
// or has not been behind for FollowerLagGrace yet.
func (w *lagWatch) tooFar(now time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since.IsZero() || now.Sub(w.since) < FollowerLagGrace {
		return nil
	}
	return fmt.Errorf("its log is %d entries behind the leader's (more than %d for %s)",
		w.behind, MaxFollowerLag, now.Sub(w.since).Round(time.Second))
}

// lagSource is what the watch reads of its node: the leader it knows,
// the leader's last log index, and its own.
type lagSource interface {
	Leader() (id, httpAddr string)
	peerApplied(id string) (uint64, error)
	lastIndex() uint64
}

// run compares this follower's log with the leader's every lagCheckEvery
// until stop closes; a leader (self), or a follower that cannot reach
// its leader, is not behind by this measure (readiness covers a missing
// leader already).
func (w *lagWatch) run(self string, src lagSource, stop <-chan struct{}) {
	t := time.NewTicker(lagCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		id, _ := src.Leader()
		if id == "" || id == self {
			w.observe(time.Now(), 0, 0)
			continue
		}
		leaderLast, err := src.peerApplied(id)
		if err != nil {
			continue
		}
		w.observe(time.Now(), leaderLast, src.lastIndex())
	}
}

// nodeLag is the node as the lag watch reads it.
type nodeLag struct{ *Node }

func (n nodeLag) lastIndex() uint64 { return n.raft.LastIndex() }
