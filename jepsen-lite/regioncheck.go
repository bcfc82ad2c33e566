package main

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/rlnode/rlnode/jepsen-lite/checker"
)

// The multi-cluster mode's check (pure, unit-tested): across every
// region and the parent, the allowed hits of each global window never
// exceed the limit. Everything runs on one machine, so the runner's
// clock, the parent's window times (resetAt) and every node's clock are
// one clock; the check gives the system slackMs for whole-millisecond
// stamps and nothing more.

// regionRecord is one hit of the multi-cluster mode: one line of
// history.jsonl.
type regionRecord struct {
	Region  string          `json:"region"` // "parent", or the region's name
	Node    string          `json:"node"`
	Policy  string          `json:"policy"`
	Key     string          `json:"key"`
	Sent    int64           `json:"sentUnixNs"` // read before the request left
	Recv    int64           `json:"recvUnixNs"` // read after the answer (or error) came back
	Outcome checker.Outcome `json:"outcome"`    // ok, unknown or fail (certainly not counted)
	Status  int             `json:"status,omitempty"`
	Code    string          `json:"code,omitempty"`
	Allowed bool            `json:"allowed,omitempty"`
	ResetAt int64           `json:"resetAt,omitempty"` // the global window the answer names (Unix ms)
	Error   string          `json:"error,omitempty"`
	// Resent marks a synthetic unknown: Go's transport re-sent the
	// request after an earlier attempt was written, which may have
	// counted too.
	Resent bool `json:"resent,omitempty"`
	// Decided is "local" for a hit an application holder decided in its
	// own process from a sub-lease (Node is then the holder, app-...).
	Decided string `json:"decided,omitempty"`
}

// fromHolder says an application holder made the record
// (regionholders.go), in its process or through its region's check.
func (h regionRecord) fromHolder() bool { return strings.HasPrefix(h.Node, "app-") }

func (h regionRecord) sentMs() float64 { return float64(h.Sent) / 1e6 }
func (h regionRecord) recvMs() float64 { return float64(h.Recv) / 1e6 }

// globalWindowStat is one key's global window as the answers name it.
type globalWindowStat struct {
	Key     string `json:"key"`
	ResetAt int64  `json:"resetAt"` // Unix ms; the window is [resetAt-window, resetAt)
	// Allowed is the allowed hits naming the window, by region.
	Allowed  int64            `json:"allowed"`
	ByRegion map[string]int64 `json:"byRegion"`
	// Decided is the allowed hits (naming any window) certainly decided
	// inside this one: sent after it opened, answered before it ended.
	Decided int64 `json:"decided"`
	// Possible adds the hits whose outcome is unknown and which were in
	// flight during the window: an upper bound, never a violation.
	Possible int64 `json:"possible"`
	// Demand is the hits sent while the window was open (and allowed
	// hits naming it sent just before), and Full says the run sent hits
	// before it opened and after it ended.
	Demand int64 `json:"demand"`
	Full   bool  `json:"full"`
	// Admission is Allowed / min(Demand, limit) for a full window with
	// demand.
	Admission *float64 `json:"admission,omitempty"`
}

// globalResult is the check's outcome.
type globalResult struct {
	Violations []checker.Violation `json:"violations"`
	Windows    []globalWindowStat  `json:"windows"`
	// Statuses counts every status seen (0: no answer).
	Statuses map[int]int `json:"statuses"`
	// MaxPossible is the largest Possible of any window; PossibleOver
	// how many windows' Possible is over the limit (reported only).
	MaxPossible  int64 `json:"maxPossible"`
	PossibleOver int   `json:"possibleOver"`
	// Admission over full windows with demand: sum(allowed) /
	// sum(min(demand, limit)), and the lowest window's.
	Admission    *float64 `json:"admission,omitempty"`
	MinAdmission *float64 `json:"minAdmission,omitempty"`
	// RegionShare is each region's share of the allowed hits of full
	// windows.
	RegionShare map[string]float64 `json:"regionShare,omitempty"`
	// Bucket is the token-bucket policy's outcome (nil without one).
	Bucket *bucketStat `json:"bucket,omitempty"`
}

// Names of the mode's checks, as in checker.Violation.Check.
const (
	checkGlobalNamed   = "global-over-limit"         // more allowed hits name a window than its limit
	checkGlobalDecided = "global-over-limit-decided" // more allowed hits certainly decided inside a window than its limit
	checkGlobalAfter   = "global-spent-after-window" // an allowed hit sent after the window it names ended
	checkGlobalStatus  = "global-wrong-status"       // an answer other than 200, 429 or 503
	checkGlobalNone    = "global-vacuous"            // no hit was allowed at all
	checkGlobalBucket  = "global-bucket-over-limit"  // a run of allowed hits of the token bucket beyond burst + refill
)

// globalConfig is what the check judges against.
type globalConfig struct {
	// Policy is the fixed-window global policy: Limit per WindowMs.
	Policy          string
	Limit, WindowMs int64
	// Bucket, when set, is the token-bucket global policy: BucketLimit
	// per BucketWindowMs, BucketBurst.
	Bucket                                   string
	BucketLimit, BucketWindowMs, BucketBurst int64
	// SlackMs is given to the system on every time comparison.
	SlackMs int64
}

// bucketStat is the token-bucket global policy's outcome.
type bucketStat struct {
	Allowed int64 `json:"allowed"`
	Hits    int64 `json:"hits"`
	// Fill is the allowed hits over burst + refill from the first hit
	// sent to the last answered: the share of what an ideal global
	// bucket could have given (demand permitting).
	Fill float64 `json:"fill"`
}

// checkGlobal judges hits: the fixed-window policy's windows, the
// token bucket's runs, and every answer's status.
func checkGlobal(hits []regionRecord, cfg globalConfig) globalResult {
	limit, windowMs, slackMs := cfg.Limit, cfg.WindowMs, cfg.SlackMs
	res := globalResult{Violations: []checker.Violation{}, Windows: []globalWindowStat{}, Statuses: map[int]int{}}
	bad := func(check, key, format string, args ...any) {
		res.Violations = append(res.Violations, checker.Violation{Check: check, Key: key, Detail: fmt.Sprintf(format, args...)})
	}
	type wkey struct {
		key     string
		resetAt int64
	}
	wins := map[wkey]*globalWindowStat{}
	first, last := map[string]float64{}, map[string]float64{}
	allowedAny := false
	for _, h := range hits {
		if h.Resent {
			continue
		}
		res.Statuses[h.Status]++
		switch h.Status {
		case 0, http.StatusOK, http.StatusTooManyRequests, http.StatusServiceUnavailable:
		default:
			bad(checkGlobalStatus, h.Key, "%s node %s answered %d %s (only 200, 429 and 503 are allowed)", h.Region, h.Node, h.Status, h.Code)
		}
		if h.Policy != cfg.Policy {
			continue
		}
		if f, ok := first[h.Key]; !ok || h.sentMs() < f {
			first[h.Key] = h.sentMs()
		}
		last[h.Key] = max(last[h.Key], h.sentMs())
		if h.Outcome != checker.OutcomeOK || !h.Allowed {
			continue
		}
		allowedAny = true
		k := wkey{h.Key, h.ResetAt}
		w := wins[k]
		if w == nil {
			w = &globalWindowStat{Key: h.Key, ResetAt: h.ResetAt, ByRegion: map[string]int64{}}
			wins[k] = w
		}
		w.Allowed++
		w.ByRegion[h.Region]++
		if h.sentMs() >= float64(h.ResetAt+slackMs) {
			bad(checkGlobalAfter, h.Key, "%s node %s: allowed hit sent %.1f ms after the end of the window it names (resetAt %d)",
				h.Region, h.Node, h.sentMs()-float64(h.ResetAt), h.ResetAt)
		}
	}
	if !allowedAny && len(hits) > 0 {
		bad(checkGlobalNone, "", "no hit was allowed: the run proves nothing")
	}
	for _, w := range wins {
		start, end := float64(w.ResetAt-windowMs), float64(w.ResetAt)
		for _, h := range hits {
			if h.Resent && h.Outcome != checker.OutcomeUnknown || h.Policy != cfg.Policy || h.Key != w.Key {
				continue
			}
			// Demand: hits sent while it was open, and the allowed hits
			// naming it sent just before it opened (decided after).
			if !h.Resent && (h.sentMs() >= start && h.sentMs() < end || h.sentMs() < start && h.Allowed && h.ResetAt == w.ResetAt) {
				w.Demand++
			}
			switch {
			case h.Outcome == checker.OutcomeOK && h.Allowed:
				if h.sentMs() >= start+float64(slackMs) && h.recvMs() <= end-float64(slackMs) {
					w.Decided++
				}
			case h.Outcome == checker.OutcomeUnknown:
				if h.sentMs() < end && h.recvMs() >= start {
					w.Possible++
				}
			}
		}
		w.Possible += w.Allowed
		w.Full = first[w.Key] < start && last[w.Key] >= end
		if w.Allowed > limit {
			bad(checkGlobalNamed, w.Key, "window ending %d: %d allowed hits name it %v, limit %d", w.ResetAt, w.Allowed, w.ByRegion, limit)
		}
		if w.Decided > limit {
			bad(checkGlobalDecided, w.Key, "window ending %d: %d allowed hits certainly decided inside it, limit %d", w.ResetAt, w.Decided, limit)
		}
		res.MaxPossible = max(res.MaxPossible, w.Possible)
		if w.Possible > limit {
			res.PossibleOver++
		}
		res.Windows = append(res.Windows, *w)
	}
	sort.Slice(res.Windows, func(i, j int) bool {
		a, b := res.Windows[i], res.Windows[j]
		return a.ResetAt < b.ResetAt || a.ResetAt == b.ResetAt && a.Key < b.Key
	})
	admission(&res, limit)
	if cfg.Bucket != "" {
		var v []checker.Violation
		res.Bucket, v = checkBucket(hits, cfg)
		res.Violations = append(res.Violations, v...)
	}
	slices.SortStableFunc(res.Violations, func(a, b checker.Violation) int {
		switch {
		case a.Check < b.Check:
			return -1
		case a.Check > b.Check:
			return 1
		}
		return 0
	})
	return res
}

// admission fills in the admission figures of full windows.
func admission(res *globalResult, limit int64) {
	var got, ideal int64
	by := map[string]int64{}
	for i := range res.Windows {
		w := &res.Windows[i]
		if !w.Full || w.Demand == 0 {
			continue
		}
		want := min(w.Demand, limit)
		a := float64(w.Allowed) / float64(want)
		w.Admission = &a
		got += w.Allowed
		ideal += want
		if res.MinAdmission == nil || a < *res.MinAdmission {
			res.MinAdmission = &a
		}
		for r, n := range w.ByRegion {
			by[r] += n
		}
	}
	if ideal > 0 {
		a := float64(got) / float64(ideal)
		res.Admission = &a
		res.RegionShare = map[string]float64{}
		for r, n := range by {
			res.RegionShare[r] = float64(n) / float64(got)
		}
	}
}

// checkBucket judges the token-bucket policy's allowed hits, over all
// regions, as the single-cluster mode judges a leased bucket: every run
// of them (in send order) was decided between the first one's send and
// the latest answer, so it holds at most burst plus what refills in that
// span (plus slack). Keys are judged apart.
func checkBucket(hits []regionRecord, cfg globalConfig) (*bucketStat, []checker.Violation) {
	st := &bucketStat{}
	byKey := map[string][]regionRecord{}
	var first, last int64
	for _, h := range hits {
		if h.Policy != cfg.Bucket || h.Resent {
			continue
		}
		st.Hits++
		if first == 0 || h.Sent < first {
			first = h.Sent
		}
		last = max(last, h.Recv)
		if h.Outcome == checker.OutcomeOK && h.Allowed {
			st.Allowed++
			byKey[h.Key] = append(byKey[h.Key], h)
		}
	}
	if st.Hits > 0 {
		ideal := float64(cfg.BucketBurst) + float64(last-first)/1e6*float64(cfg.BucketLimit)/float64(cfg.BucketWindowMs)
		st.Fill = float64(st.Allowed) / ideal
	}
	var out []checker.Violation
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		allowed := byKey[key]
		sort.Slice(allowed, func(i, j int) bool { return allowed[i].Sent < allowed[j].Sent })
	runs:
		for i := range allowed {
			end := int64(0)
			for j := i; j < len(allowed); j++ {
				end = max(end, allowed[j].Recv)
				spanMs := (end-allowed[i].Sent+1e6-1)/1e6 + cfg.SlackMs
				bound := cfg.BucketBurst + spanMs*cfg.BucketLimit/cfg.BucketWindowMs
				if n := int64(j - i + 1); n > bound {
					out = append(out, checker.Violation{Check: checkGlobalBucket, Key: key,
						Detail: fmt.Sprintf("token bucket %s: %d allowed within %d ms (from %s's hit at %d), burst %d + refill allows %d",
							cfg.Bucket, n, spanMs, allowed[i].Region, allowed[i].Sent/1e6, cfg.BucketBurst, bound)})
					break runs // one per key: the first run over is the story
				}
			}
		}
	}
	return st, out
}
