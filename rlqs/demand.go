package rlqs

import "time"

// Demand decides which buckets are renewed. A grant entry is a log write
// on the leader, so a bucket is renewed only while its reports show
// requests: a report with demand pays for the renewals of the next two
// reporting intervals (as seen here, between the bucket's reports; at
// least one lease, at most ColdAfter), so a bucket in steady use never
// runs out between two reports, and one whose reports show no use stops
// being renewed two intervals after its last request. Its assignment then
// runs out at its TTL, and until the next report with demand Envoy's
// expired_assignment_behavior applies. One report claiming one request in
// each of a stream's buckets therefore costs one lease's renewals, not
// ColdAfter's.

// sawReport records a report of b at now, with demand or without. Called
// with q.mu held.
func (q *stream) sawReport(b *bucket, now time.Time, demand bool) {
	if !b.lastReport.IsZero() {
		b.every = now.Sub(b.lastReport)
	}
	b.lastReport = now
	if demand || b.renewUntil.IsZero() { // a new bucket's first report is its first request
		b.lastDemand = now
		b.renewUntil = now.Add(min(max(2*b.every, q.cfg.Lease), q.cfg.ColdAfter))
	}
}

// renewable is the buckets to renew now: mapped, with demand, and due;
// when any is due, also those due within a quarter lease, so that one
// grant entry renews them together and their renewals stay aligned.
// Called with q.mu held.
func (q *stream) renewable(now time.Time) []*bucket {
	soon := now.Add(q.cfg.Lease / 4)
	var due, early []*bucket
	for _, b := range q.buckets {
		if !b.mapped || !now.Before(b.renewUntil) {
			continue
		}
		switch {
		case !now.Before(b.renewAt):
			due = append(due, b)
		case b.renewAt.Before(soon):
			early = append(early, b)
		}
	}
	if len(due) == 0 {
		return nil
	}
	return append(due, early...)
}
