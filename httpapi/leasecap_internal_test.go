package httpapi

import (
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
)

// A holder gets at most max grants outstanding; returned, expired and
// empty grants do not count.
func TestHolderGrantsCap(t *testing.T) {
	h := newHolderGrants(2)
	for id := uint64(1); id <= 2; id++ {
		release, err := h.reserve("a")
		if err != nil {
			t.Fatalf("grant %d: %v", id, err)
		}
		release(cluster.Grant{ID: id, Units: 1, Valid: time.Hour})
	}
	if _, err := h.reserve("a"); err == nil {
		t.Fatal("a third grant was allowed with a cap of 2")
	}
	if _, err := h.reserve("b"); err != nil {
		t.Fatalf("another holder: %v", err)
	}
	h.forget("a", 1)
	release, err := h.reserve("a")
	if err != nil {
		t.Fatalf("after a return: %v", err)
	}
	release(cluster.Grant{ID: 3, Units: 0}) // nothing granted: holds nothing
	release2, err := h.reserve("a")
	if err != nil {
		t.Fatalf("after an empty grant: %v", err)
	}
	release2(cluster.Grant{ID: 4, Units: 1, Valid: time.Millisecond})
	time.Sleep(5 * time.Millisecond) // the grant's own validity, not a wait for a condition
	if _, err := h.reserve("a"); err != nil {
		t.Fatalf("after a grant expired: %v", err)
	}
}
