package lease

import "time"

// Tracker tells hot keys from cold ones: it counts each key's hits in the
// current and the previous period, and a key is hot once that count
// reaches the threshold. Memory is two maps of at most maxKeys keys. Not
// safe for concurrent use.
type Tracker[K comparable] struct {
	period    int64
	maxKeys   int
	threshold int32
	seen      [2]map[K]int32
	since     int64
}

// NewTracker counts hits per period; threshold hits in two periods make
// a key hot.
func NewTracker[K comparable](threshold int, period time.Duration, maxKeys int, now Stamp) *Tracker[K] {
	t := &Tracker[K]{period: int64(period), maxKeys: maxKeys, threshold: int32(max(threshold, 1)), since: now.Mono}
	t.seen[0], t.seen[1] = make(map[K]int32), make(map[K]int32)
	return t
}

// SetThreshold changes how many hits make a key hot (at least 1).
func (t *Tracker[K]) SetThreshold(n int) { t.threshold = int32(max(n, 1)) }

// Threshold is the hits that make a key hot now.
func (t *Tracker[K]) Threshold() int { return int(t.threshold) }

// Hit counts a hit of k and reports whether k is hot. A key not seen
// before is not counted while the current period already tracks maxKeys.
func (t *Tracker[K]) Hit(k K, now Stamp) bool {
	t.rotate(now)
	c := t.seen[0][k]
	if c == 0 && len(t.seen[0]) >= t.maxKeys {
		return false
	}
	c++
	t.seen[0][k] = c
	return c+t.seen[1][k] >= t.threshold
}

// Forget drops what is counted of k (it became held, or went away).
func (t *Tracker[K]) Forget(k K) {
	delete(t.seen[0], k)
	delete(t.seen[1], k)
}

func (t *Tracker[K]) rotate(now Stamp) {
	d := now.Mono - t.since
	if d < t.period {
		return
	}
	t.seen[1], t.seen[0] = t.seen[0], make(map[K]int32, len(t.seen[0]))
	if d >= 2*t.period {
		clear(t.seen[1])
	}
	t.since = now.Mono
}
