package httpapi

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
)

// A holder gets at most max grants outstanding; returned, expired and
// empty grants do not count.
func TestHolderGrantsCap(t *testing.T) {
	h := newHolderGrants(2, 100)
	for id := uint64(1); id <= 2; id++ {
		release, err := h.reserve("c", "a")
		if err != nil {
			t.Fatalf("grant %d: %v", id, err)
		}
		release(cluster.Grant{ID: id, Units: 1, Valid: time.Hour})
	}
	if _, err := h.reserve("c", "a"); err == nil {
		t.Fatal("a third grant was allowed with a cap of 2")
	}
	if _, err := h.reserve("c", "b"); err != nil {
		t.Fatalf("another holder: %v", err)
	}
	h.forget("c", "a", 1)
	release, err := h.reserve("c", "a")
	if err != nil {
		t.Fatalf("after a return: %v", err)
	}
	release(cluster.Grant{ID: 3, Units: 0}) // nothing granted: holds nothing
	release2, err := h.reserve("c", "a")
	if err != nil {
		t.Fatalf("after an empty grant: %v", err)
	}
	release2(cluster.Grant{ID: 4, Units: 1, Valid: time.Millisecond})
	time.Sleep(5 * time.Millisecond) // the grant's own validity, not a wait for a condition
	if _, err := h.reserve("c", "a"); err != nil {
		t.Fatalf("after a grant expired: %v", err)
	}
}

// One credential gets at most maxPerCred grants over all its holder ids,
// while another credential still gets its first; returned and expired
// grants give its share back.
func TestCredentialGrantsCap(t *testing.T) {
	h := newHolderGrants(100, 3)
	for i := range 3 {
		release, err := h.reserve("mallory", fmt.Sprintf("h%d", i))
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		release(cluster.Grant{ID: uint64(i + 1), Units: 1, Valid: time.Hour})
	}
	if _, err := h.reserve("mallory", "fresh-holder"); !errors.Is(err, errCredentialGrants) {
		t.Fatalf("a fourth grant under a new holder id: %v", err)
	}
	if _, err := h.reserve("alice", "h0"); err != nil {
		t.Fatalf("another credential's first: %v", err)
	}
	h.forget("mallory", "h1", 2)
	if _, err := h.reserve("mallory", "fresh-holder"); err != nil {
		t.Fatalf("after a return: %v", err)
	}
}
