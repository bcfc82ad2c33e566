package cluster

import (
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
)

// An error a leader operation failed with crosses the internal endpoint
// as a problem document and comes back matching the same cluster errors,
// with the leader's words and the node that answered.
func TestLeaderErrorsRoundTrip(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("remove n9: %w", ErrUnknownServer),
		fmt.Errorf("%w %q", ErrUnknownPolicy, "api"),
		fmt.Errorf("transfer leadership to n2: %w", errors.Join(ErrConflict, ErrClockSkew)),
		fmt.Errorf("restore: %w: it holds 3 windows", ErrNotEmpty),
		fmt.Errorf("restore: the body is %w", ErrInvalidBackup),
		ErrNotLeader,
		// Nothing written, for a reason the leader names in words only:
		// the sender must still know it may ask again.
		notCounted(nil, errCatchingUp),
		errors.New("disk on fire"),
	} {
		rec := httptest.NewRecorder()
		writeError(rec, "n1", err)
		resp := rec.Result()
		body, _ := io.ReadAll(resp.Body)
		got := decodeHTTPError(resp, body)
		for _, c := range errorCodes {
			if errors.Is(got, c.err) != errors.Is(err, c.err) {
				t.Errorf("%q: came back as %q, errors.Is(%v) = %v", err, got, c.err, errors.Is(got, c.err))
			}
		}
		if errors.Is(err, ErrNotCounted) && !errors.Is(got, ErrNotCounted) {
			t.Errorf("%q: came back as %q, no longer not counted (the sender would report an unknown outcome)", err, got)
		}
		var he *HTTPError
		if !errors.As(got, &he) || he.Detail != err.Error() || he.ServedBy != "n1" {
			t.Errorf("%q: came back as %+v", err, he)
		}
	}
}
