package checker

import (
	"slices"
	"testing"
)

// A 403 from a node is a cluster condition dressed as the caller's fault
// (issue 31: a removed node answered "forbidden"): the run is invalid even
// though every window and every read is right. 429, 503 and the caller's
// own 4xx pass.
func TestCheckFlagsForbiddenAnswers(t *testing.T) {
	h := history{}.allow(0, 0, 10, t0, 2).allow(1, 20, 30, t0, 1)
	h = h.lost(2, KindHit, 40, 50)
	h[len(h)-1].Status, h[len(h)-1].Error = 503, "HTTP 503 outcome_unknown"
	h = h.lost(3, KindHit, 60, 70)
	h[len(h)-1].Status, h[len(h)-1].Error = 404, "HTTP 404 unknown_policy"
	clean := Check(cfg, h)
	if !clean.Valid {
		t.Fatalf("200, 429, 503 and 404 answers: want valid, got %+v", clean.Violations)
	}

	h = h.lost(4, KindHit, 80, 90)
	h[len(h)-1].Status, h[len(h)-1].Error = 403, "HTTP 403 forbidden: the leader refused the request"
	h = h.lost(5, KindHit, 80, 90)
	h[len(h)-1].Status = 403
	h = h.lost(6, KindHit, 80, 90)
	h[len(h)-1].Status = 401
	res := Check(cfg, h)
	if res.Valid {
		t.Fatal("403 and 401 answers passed the checker")
	}
	var got []Violation
	for _, v := range res.Violations {
		if v.Check == CheckWrongStatus {
			got = append(got, v)
		}
	}
	if len(got) != 2 || !slices.Equal(got[0].OpIDs, []int{7}) || !slices.Equal(got[1].OpIDs, []int{5, 6}) {
		t.Errorf("wrong-status violations %+v, want one for 401 (op 7) and one for 403 (ops 5, 6)", got)
	}
}
