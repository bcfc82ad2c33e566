package cluster

import "net/http"

// Failures lists one error for every way a cluster call can fail as a
// front end sees it, for the front ends' tests of their public mappings
// (no 4xx but the caller's own mistakes may reach a public caller for a
// cluster condition): each cluster error, each reason of a failed hit,
// and each answer of the internal hop (errorCodes, and the refusals of
// the hop's own guards) as the forwarding node decodes it, bare and as
// the cause of a hit the leader refused. A code added to errorCodes is
// in the list at once.
func Failures() []error {
	var out []error
	for _, c := range errorCodes {
		hop := &HTTPError{Status: c.status, Code: c.code, Detail: "the leader answered " + c.code, codes: []string{c.code}}
		out = append(out, c.err, hop, notCounted(nil, hop))
	}
	guards := []*HTTPError{
		{Status: http.StatusUnauthorized, Code: "unauthorized", Detail: "this endpoint needs the cluster token"},
		{Status: http.StatusForbidden, Code: "forbidden", Detail: "node-to-node endpoint: not a node certificate"},
		{Status: http.StatusMethodNotAllowed, Code: "invalid_request", Detail: "GET is not allowed"},
		{Status: http.StatusRequestEntityTooLarge, Code: "invalid_request", Detail: "forward body too large"},
		{Status: http.StatusNotFound, Code: "not_found", Detail: "no endpoint (an older leader)"},
	}
	for _, g := range guards {
		out = append(out, g, notCounted(nil, g))
	}
	for _, reason := range []error{nil, ErrNoLeader, ErrNotLeader, ErrNotMember} {
		out = append(out, notCounted(reason, nil))
	}
	return append(out, outcomeUnknown(nil), ErrNotCounted, ErrOutcomeUnknown, ErrNotLeased)
}
