package policy

// Capacity is the most one hit may cost under l: its burst when set (a
// token bucket's capacity), else its limit.
func (l Limit) Capacity() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.Limit
}

// NeverAllows reports the first limit whose capacity a hit of cost
// exceeds: such a hit can never be allowed, however long it waits.
func (p Policy) NeverAllows(cost int64) (int, bool) {
	for i, l := range p.Limits {
		if cost > l.Capacity() {
			return i, true
		}
	}
	return 0, false
}
