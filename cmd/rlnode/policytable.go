package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/rlnode/rlnode/httpapi"
	"github.com/rlnode/rlnode/policy"
)

// tableAttempts is how many times a whole-table write reads the table,
// computes its change and writes it before giving up on a table other
// writers keep changing.
const tableAttempts = 5

// fetchTable reads the policy table and its version (the ETag that a
// whole-table write names in If-Match).
func fetchTable(ctx context.Context, a *adminFlags) ([]policy.Policy, string, error) {
	var l policyTable
	hdr, err := a.callWith(ctx, http.MethodGet, httpapi.PoliciesPath, nil, nil, &l)
	if err != nil {
		return nil, "", err
	}
	version := hdr.Get("ETag")
	if version == "" {
		return nil, "", fmt.Errorf("GET %s: the node answered no ETag (a release before table versions?); upgrade it to write the whole table", httpapi.PoliciesPath)
	}
	return l.Policies, version, nil
}

// errNoWrite is what a table change returns when there is nothing to
// write.
var errNoWrite = errors.New("nothing to write")

// replaceTable is every whole-table write: read the table, let change
// compute the new one from it (errNoWrite: nothing to write), and write it
// naming the version it was computed from. When another writer changed the
// table in between, the leader refuses (409 table_changed) and it starts
// again from a fresh read, up to tableAttempts times with a short jittered
// pause, so no change made meanwhile is undone.
func replaceTable(ctx context.Context, a *adminFlags, change func(all []policy.Policy) ([]policy.Policy, error)) error {
	var last *answerError
	for attempt := 1; attempt <= tableAttempts; attempt++ {
		all, version, err := fetchTable(ctx, a)
		if err != nil {
			return err
		}
		table, err := change(all)
		if errors.Is(err, errNoWrite) {
			return nil
		} else if err != nil {
			return err
		}
		_, err = a.callWith(ctx, http.MethodPut, httpapi.PoliciesPath, http.Header{"If-Match": {version}}, policyTable{Policies: table}, nil)
		if !isAnswer(err, httpapi.CodeTableChanged) {
			return err
		}
		errors.As(err, &last)
		if attempt == tableAttempts {
			break
		}
		if a.stderr != nil {
			fmt.Fprintf(a.stderr, "the policy table changed while this change was computed; reading it again (attempt %d of %d)\n", attempt+1, tableAttempts)
		}
		// 25-75 ms, then more: writers that collided spread out.
		pause := time.Duration(attempt) * (25*time.Millisecond + rand.N(50*time.Millisecond))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
	// The leader's words without the operation it repeats: "it was
	// computed from version X, the table is now version Y; ...".
	detail := last.detail
	if _, rest, ok := strings.Cut(detail, "changed since it was read: "); ok {
		detail = rest
	}
	return fmt.Errorf("table_changed: the policy table changed under this command %d times in a row (another writer keeps changing it); nothing was written; run it again (last refusal: %s)", tableAttempts, detail)
}
