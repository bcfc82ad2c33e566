package checker

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// callerStatuses are the 4xx a node may answer for the caller's own
// mistake (bad request, unknown policy, conflict, too large, cost above
// the limit) or a refusal (429). The workload makes no such mistakes
// except 429, but they are a caller's, not the cluster's. Any other 4xx
// is a cluster condition dressed as the caller's fault (a removed node
// once answered 403 "forbidden", which proxies read as "deny this user").
var callerStatuses = map[int]bool{400: true, 404: true, 409: true, 413: true, 422: true, 429: true}

// wrongStatuses reports, per status, the ops answered with a 4xx that is
// not the caller's mistake.
func wrongStatuses(history []Op) []Violation {
	byStatus := map[int][]int{}
	first := map[int]Op{}
	for _, op := range history {
		if op.Status < 400 || op.Status >= 500 || callerStatuses[op.Status] {
			continue
		}
		if len(byStatus[op.Status]) == 0 {
			first[op.Status] = op
		}
		byStatus[op.Status] = append(byStatus[op.Status], op.ID)
	}
	var out []Violation
	for _, s := range slices.Sorted(maps.Keys(byStatus)) {
		op := first[s]
		out = append(out, Violation{Check: CheckWrongStatus, Key: op.Key,
			Detail: fmt.Sprintf("%d ops answered HTTP %d, which is no mistake of the caller's (first: op %d on node %s: %s)",
				len(byStatus[s]), s, op.ID, op.Node, strings.TrimSpace(op.Error)),
			OpIDs: byStatus[s]})
	}
	return out
}
