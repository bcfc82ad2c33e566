package checker

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// Names of the budget checks, as they appear in Violation.Check.
const (
	CheckPermitsOverLimit      = "permits-over-limit"
	CheckReservationsOverLimit = "reservations-over-limit"
)

// PermitOp is one permit as a client saw it: the acquire, and the release
// that followed, if any. Times are ns since the run's start on the client's
// monotonic clock.
type PermitOp struct {
	ID  int    `json:"id"`
	Key string `json:"key"`
	// Invoke and Return bound the acquire; Outcome is ok (Acquired says
	// whether a permit was taken), unknown, or fail (certainly nothing).
	Invoke, Return int64
	Outcome        Outcome `json:"outcome"`
	Acquired       bool    `json:"acquired"`
	TTLMs          int64   `json:"ttlMs"`
	// ReleaseInvoke is when the release was sent (0: never released, the
	// permit was left to its TTL); ReleaseOutcome as Outcome.
	ReleaseInvoke  int64   `json:"releaseInvoke,omitempty"`
	ReleaseOutcome Outcome `json:"releaseOutcome,omitempty"`
}

// CheckPermits checks that no key ever had more than limit permits
// certainly live at once. A permit is certainly live from the acquire's
// answer until the release was sent (unless the release certainly had no
// effect), or until its TTL less slackMs (the
// cluster's clock may run ahead of the client's by up to slackMs after a
// failover to a leader whose clock is ahead, ending permits that much
// early in real time). Unknown acquires may be live until their TTL: they
// never count against the limit here (they may explain refusals), which
// is what "counted as possibly live" means for the never-over check.
func CheckPermits(ops []PermitOp, limit int, slackMs int64) []Violation {
	type edge struct {
		at    int64
		delta int
		op    int
	}
	byKey := map[string][]edge{}
	for _, op := range ops {
		if op.Outcome != OutcomeOK || !op.Acquired {
			continue
		}
		end := op.Invoke + (op.TTLMs-slackMs)*1_000_000
		if op.ReleaseInvoke > 0 && releaseMayHaveApplied(op.ReleaseOutcome) {
			end = min(end, op.ReleaseInvoke)
		}
		if end <= op.Return {
			continue
		}
		byKey[op.Key] = append(byKey[op.Key], edge{op.Return, 1, op.ID}, edge{end, -1, op.ID})
	}
	var out []Violation
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		es := byKey[key]
		// Ends before starts at the same instant: touching is not overlap.
		slices.SortFunc(es, func(a, b edge) int {
			if a.at != b.at {
				return cmp.Compare(a.at, b.at)
			}
			return a.delta - b.delta
		})
		live := map[int]bool{}
		for _, e := range es {
			if e.delta < 0 {
				delete(live, e.op)
				continue
			}
			live[e.op] = true
			if len(live) > limit {
				ids := make([]int, 0, len(live))
				for id := range live {
					ids = append(ids, id)
				}
				slices.Sort(ids)
				out = append(out, Violation{Check: CheckPermitsOverLimit, Key: key, OpIDs: ids,
					Detail: fmt.Sprintf("%d permits certainly live at +%.3fs, limit %d", len(live), float64(e.at)/1e9, limit)})
				break
			}
		}
	}
	return out
}

// releaseMayHaveApplied: a release answered ok, unknown, or 404 (the
// permit was gone already), or not recorded, may have ended the permit
// when it was sent; one that certainly had no effect (fail: 503 not
// counted, a refusal) leaves it live until its TTL.
func releaseMayHaveApplied(o Outcome) bool {
	return o == "" || o == OutcomeOK || o == OutcomeUnknown || o == SettleNotFound
}

// ReservationOp is one reservation as a client saw it: the reserve and the
// settle that followed, if any.
type ReservationOp struct {
	ID      int     `json:"id"`
	Key     string  `json:"key"`
	Units   int64   `json:"units"`
	Outcome Outcome `json:"outcome"`
	// Reserved: the reserve was answered 201; ResetAt (cluster Unix ms)
	// names the window the units were charged in.
	Reserved bool  `json:"reserved"`
	ResetAt  int64 `json:"resetAt,omitempty"`
	// Actual is what the settle asked to be charged (-1: never settled);
	// SettleOutcome is ok, unknown, fail, or notfound (the reservation had
	// expired: it stays charged at Units).
	Actual        int64   `json:"actual"`
	SettleOutcome Outcome `json:"settleOutcome,omitempty"`
}

// SettleNotFound is a settle answered 404: the reservation had expired.
const SettleNotFound Outcome = "notfound"

// CheckReservations checks that after every settle no window of a key was
// charged more than limit: the sum, over the reservations certainly made
// in that window, of the least each can still be charged (Actual when a
// settle may have applied, else Units) stays within the limit.
func CheckReservations(ops []ReservationOp, limit int64) []Violation {
	type win struct {
		key   string
		reset int64
	}
	sum := map[win]int64{}
	ids := map[win][]int{}
	for _, op := range ops {
		if op.Outcome != OutcomeOK || !op.Reserved {
			continue
		}
		charge := op.Units
		if op.Actual >= 0 && (op.SettleOutcome == OutcomeOK || op.SettleOutcome == OutcomeUnknown) {
			charge = min(op.Units, op.Actual)
		}
		w := win{op.Key, op.ResetAt}
		sum[w] += charge
		ids[w] = append(ids[w], op.ID)
	}
	var out []Violation
	for w, s := range sum {
		if s > limit {
			out = append(out, Violation{Check: CheckReservationsOverLimit, Key: w.key, OpIDs: ids[w],
				Detail: fmt.Sprintf("the window ending at %d ms was charged at least %d units after settles, limit %d", w.reset, s, limit)})
		}
	}
	slices.SortFunc(out, func(a, b Violation) int { return cmp.Compare(a.Key+a.Detail, b.Key+b.Detail) })
	return out
}
