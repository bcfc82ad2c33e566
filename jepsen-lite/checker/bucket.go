package checker

// The token-bucket model. Each limit i of a token-bucket policy is a bucket
// of capacity B_i refilled at one token per T_i = W_i/L_i ms (the checker
// requires T_i to be whole milliseconds, so everything below is exact
// integer arithmetic). The model keeps each bucket as its theoretical
// arrival time tat_i (GCRA): the bucket is full at tat_i and after, and at
// time n < tat_i it holds B_i - (tat_i-n)/T_i tokens. A hit of cost 1 at n
// is allowed iff every bucket has a token: max(tat_i, n) + T_i <= n +
// B_i*T_i for all i; an allowed hit moves every tat_i to max(tat_i, n) +
// T_i, a refused one changes nothing. The answer reports, per limit,
// resetAt = the time the bucket is full again = max(tat_i, n) (after the
// hit if it counted: + T_i) and remaining = floor((n + B_i*T_i -
// resetAt_i)/T_i), and for a refused hit retryAfterMs = the exact time
// until every bucket has a token: max over i of max(tat_i, n) + T_i -
// B_i*T_i - n.
//
// So every definite answer gives the model each bucket's new tat exactly
// (it is resetAt), and pins or bounds the FSM time n of the op: remaining
// bounds it to one refill interval per limit, retryAfterMs pins it, and a
// bucket that was full when the hit arrived pins it to resetAt - T_i. A
// refill that came too early (a token handed out before its time) shows up
// as no time n being consistent with the answer, the previous tat and the
// clock never running backwards.
//
// Unknown hits are spent lazily: j of them may have been applied between
// the previous op and this one (clock <= t <= n). For one bucket, j hits at
// one instant t reach every tat j hits spread over time can reach (a hit
// applied later, after a refill, makes no difference beyond what an earlier
// one could do, or is the same as fewer hits at a later t); several buckets
// each get their own instant (see bucketLost).

// bucketHit returns every state one definite hit can leave. fresh says the
// policy's limits changed since the key was last seen: how an existing
// bucket maps onto a new rate is rlnode's choice, so that op takes the
// buckets' levels from the answer and judges only what follows.
func bucketHit(limits []Limit, st kstate, o obs, fresh bool) []kstate {
	n := len(limits)
	if len(o.limits) != n {
		return nil
	}
	var out []kstate
	// On a refused op, a limit that would have allowed the hit may report
	// its resetAt and its remaining each as if the hit had counted or as
	// it stands (rlnode reports remaining as it stands, since nothing was
	// spent, and resetAt as decided). resetHyp and remHyp say which
	// limits report which as if counted; a counted op reports both.
	all := 1<<n - 1
	for resetHyp := 0; resetHyp <= all; resetHyp++ {
		for remHyp := 0; remHyp <= all; remHyp++ {
			if o.counted && (resetHyp != all || remHyp != all) {
				continue
			}
			var m [maxLimits]int64
			for i, l := range limits {
				m[i] = o.limits[i].ResetAt
				if resetHyp>>i&1 == 1 {
					m[i] -= l.WindowMs / l.Limit
				}
			}
			out = append(out, bucketWith(limits, st, o, fresh, m, resetHyp|remHyp, remHyp)...)
		}
	}
	return out
}

// bucketWith checks the answer given m[i] = max(tat_i, n) for each limit
// (the level the hit was decided on) and returns the resulting states. hyp
// has the limits that report anything as if the hit had counted (they must
// have allowed it), remHyp those whose remaining does.
func bucketWith(limits []Limit, st kstate, o obs, fresh bool, m [maxLimits]int64, hyp, remHyp int) []kstate {
	// The FSM time n: from remaining, per limit.
	nlo, nhi := st.clock, int64(1<<62)
	minM := int64(1 << 62)
	for i, l := range limits {
		T, B := l.WindowMs/l.Limit, l.capacity(TokenBucket)
		r := o.limits[i]
		if r.Remaining < 0 {
			return nil
		}
		// remaining = floor((n + B*T - level)/T), level = m_i (+ T if
		// reported as if counted)
		level := m[i]
		if remHyp>>i&1 == 1 {
			level += T
		}
		// rlnode reports 0 for a level below 0, which a raised limit can
		// leave behind (a shorter refill interval turns the same arrival
		// time into more missing tokens than the new burst holds).
		if r.Remaining > 0 {
			nlo = max(nlo, level-B*T+r.Remaining*T)
		}
		nhi = min(nhi, level-B*T+(r.Remaining+1)*T-1)
		minM = min(minM, m[i])
	}
	nhi = min(nhi, minM) // n <= max(tat_i, n) = m_i
	// allowed (as a whole, or this hit alone) iff every bucket has a
	// token at n: m_i + T_i <= n + B_i*T_i.
	allFrom := int64(-1 << 62) // n from which every bucket has a token
	for i, l := range limits {
		T, B := l.WindowMs/l.Limit, l.capacity(TokenBucket)
		allFrom = max(allFrom, m[i]+T-B*T)
		if hyp>>i&1 == 1 {
			// reported as if counted: only where this bucket allowed it
			nlo = max(nlo, m[i]+T-B*T)
		}
	}
	if o.allowed {
		nlo = max(nlo, allFrom)
	} else {
		nhi = min(nhi, allFrom-1)
		// retryAfterMs pins n (an answer without it pins nothing)
		if pin := allFrom - o.retryAfter; o.retryAfter != 0 {
			if o.retryAfter < 0 || pin < nlo || pin > nhi {
				return nil
			}
			nlo, nhi = pin, pin
		}
	}
	if nlo > nhi {
		return nil
	}
	next := func(nmin int64, lost int64) kstate {
		k := st
		k.clock = nmin
		k.lost = int32(lost)
		for i, l := range limits {
			k.tat[i] = m[i]
			if o.counted {
				k.tat[i] += l.WindowMs / l.Limit
			}
		}
		return k
	}
	if fresh {
		return []kstate{next(nlo, int64(st.lost))}
	}
	var out []kstate
	maxJ := int64(st.lost)
	for _, l := range limits {
		maxJ = min(maxJ, l.capacity(TokenBucket)) // more never fit in a bucket
	}
	for j := int64(0); j <= maxJ; j++ {
		if nmin, ok := bucketLost(limits, st, m, minM, nlo, nhi, j); ok {
			out = append(out, next(nmin, int64(st.lost)-j))
		}
	}
	return out
}

// bucketLost returns the lowest n in [nlo, nhi] at which the buckets,
// after j lost hits, stand at m_i = max(P_i, n), where P_i is bucket i's
// tat before the op. n < m_i means P_i = m_i exactly; n = m_i (only
// possible for the smallest m) means P_i <= n.
//
// For one bucket, j hits spread over [clock, n] reach exactly what j hits
// at one instant t_i in [clock, n] reach. The instants of different buckets
// need not agree: hits spread over time (a follower forwarding lost hits
// to a new leader one batch at a time) move a fast and a slow bucket as no
// single instant does. So each bucket gets its own t_i. That admits some
// pairs of levels no spread of hits reaches, a weaker check where hits were
// lost, never a false alarm.
func bucketLost(limits []Limit, st kstate, m [maxLimits]int64, minM, nlo, nhi, j int64) (int64, bool) {
	best := int64(-1)
	// Two cases: n below every m_i, or n equal to the smallest.
	for _, atMin := range []bool{false, true} {
		lo, hi := nlo, nhi
		if atMin {
			lo, hi = max(lo, minM), min(hi, minM)
		} else {
			hi = min(hi, minM-1)
		}
		if lo > hi {
			continue
		}
		ok := true
		for i, l := range limits {
			eq := !(atMin && m[i] == minM) // P_i must equal m_i
			if j == 0 {
				if (eq && st.tat[i] != m[i]) || (!eq && st.tat[i] > m[i]) {
					ok = false
				}
				continue
			}
			tlo, ok1 := lostInstant(l, st.tat[i], m[i], st.clock, eq, j)
			if !ok1 {
				ok = false
				continue
			}
			lo = max(lo, tlo) // t_i <= n
		}
		if ok && lo <= hi && (best < 0 || lo < best) {
			best = lo
		}
	}
	return best, best >= 0
}

// lostInstant returns the earliest instant t >= clock at which j lost hits
// take one bucket from tat to level m (P = m if eq, else P <= m), each with
// a token to spend, and whether there is one.
func lostInstant(l Limit, tat, m, clock int64, eq bool, j int64) (int64, bool) {
	T, B := l.WindowMs/l.Limit, l.capacity(TokenBucket)
	if j > B {
		return 0, false
	}
	tlo, thi := clock, int64(1<<62)
	// P = max(tat, t) + j*T
	q := m - j*T
	switch {
	case !eq && tat <= q:
		thi = q
	case !eq:
		return 0, false
	case tat == q:
		thi = q
	case tat < q:
		tlo, thi = max(tlo, q), q
	default:
		return 0, false
	}
	// every lost hit fit: max(tat, t) + j*T <= t + B*T
	tlo = max(tlo, tat-(B-j)*T)
	return tlo, tlo <= thi
}
