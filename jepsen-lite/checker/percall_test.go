package checker

import "testing"

func TestCheckCalls(t *testing.T) {
	lim := CallLimits{TokenLimit: 2, LeakyLimit: 2, DurationMs: 1000}
	ms := int64(1e6)
	tok := func(id int, reset int64) CallOp {
		return CallOp{ID: id, Key: "t", Outcome: OutcomeOK, Allowed: true, Limit: 2, Remaining: 0, ResetTime: reset}
	}
	leaky := func(id int, at int64) CallOp {
		return CallOp{ID: id, Key: "l", Leaky: true, Outcome: OutcomeOK, Allowed: true, Limit: 2, Remaining: 1, Invoke: at * ms, Return: at*ms + ms}
	}
	good := []CallOp{tok(1, 5000), tok(2, 5000), tok(3, 6000), {ID: 4, Key: "t", Outcome: OutcomeUnknown},
		leaky(5, 0), leaky(6, 10), leaky(7, 600), leaky(8, 1200)}
	if v := CheckCalls(good, lim, 0); len(v) != 0 {
		t.Fatalf("a valid history: %+v", v)
	}
	for name, c := range map[string]struct {
		ops  []CallOp
		want string
	}{
		"three in one token window": {[]CallOp{tok(1, 5000), tok(2, 5000), tok(3, 5000)}, CheckCallTokenOverLimit},
		"token windows overlap":     {[]CallOp{tok(1, 5000), tok(2, 5500)}, CheckCallTokenWindows},
		"leaky burst past bucket":   {[]CallOp{leaky(1, 0), leaky(2, 10), leaky(3, 20), leaky(4, 30)}, CheckCallLeakyOverLimit},
		"wrong limit answered":      {[]CallOp{{ID: 1, Key: "t", Outcome: OutcomeOK, Allowed: true, Limit: 3}}, CheckCallAnswerMalformed},
	} {
		v := CheckCalls(c.ops, lim, 0)
		if len(v) == 0 || v[0].Check != c.want {
			t.Errorf("%s: %+v, want %s", name, v, c.want)
		}
	}
}
