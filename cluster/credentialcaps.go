package cluster

import (
	"errors"
	"fmt"

	"github.com/rlnode/rlnode/fsm"
)

// CredentialCaps bound what one credential (certificate, else token,
// else source address: internal/credential, the owner a permit or a
// reservation is bound to) may hold through the log, well below the
// node-wide bounds, so one caller filling its share is refused (429
// credential_budget, naming it) while every other caller still gets its
// first. The leader checks them before the log against counts the state
// machine keeps on apply (fsm.PermitsOfOwner, fsm.ReservedBytesOfOwner):
// the caps are this node's flags, not replicated state, so they never
// decide an entry's outcome and every replica applies the same entries
// (cluster/DESIGN.md, "Budgets per credential").
type CredentialCaps struct {
	// Permits is the most permits one credential holds live (renewals
	// keep a permit live, so they count).
	Permits int64
	// ReservedBytes is the most one credential's reservations may hold
	// (fsm.ReservationBytes: keys by their bytes, not reservations by
	// count), settled ones until their TTL.
	ReservedBytes int64
	// ReservedBytesTotal bounds every credential's reservations together
	// on this cluster.
	ReservedBytesTotal int64
}

// Defaults of the caps (rlnode serve --permits-per-credential,
// --reserved-bytes-per-credential, --reserved-bytes).
const (
	// DefaultPermitsPerCredential: a sixteenth of the state machine's
	// fsm.MaxPermits (2^20), so sixteen callers must conspire to fill
	// it; 65,536 permits live at once is more concurrency than one
	// application's instances hold.
	DefaultPermitsPerCredential = fsm.MaxPermits / 16
	// DefaultReservedBytesPerCredential: 8 MiB, some 30,000 one-key
	// reservations of short names (or 18,000 keys of 250-byte names).
	DefaultReservedBytesPerCredential = 8 << 20
	// DefaultReservedBytesTotal: 512 MiB across every credential, about
	// fsm.MaxReservations one-key reservations.
	DefaultReservedBytesTotal = 512 << 20
)

func (c CredentialCaps) withDefaults() CredentialCaps {
	if c.Permits == 0 {
		c.Permits = DefaultPermitsPerCredential
	}
	if c.ReservedBytes == 0 {
		c.ReservedBytes = DefaultReservedBytesPerCredential
	}
	if c.ReservedBytesTotal == 0 {
		c.ReservedBytesTotal = DefaultReservedBytesTotal
	}
	return c
}

// Validate refuses caps that would refuse everyone or exceed the
// node-wide bounds.
func (c CredentialCaps) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Permits < 1 || c.Permits > fsm.MaxPermits {
		errs = append(errs, fmt.Errorf("permits per credential %d: want 1 to %d", c.Permits, fsm.MaxPermits))
	}
	if c.ReservedBytes < 1<<10 || c.ReservedBytes > c.ReservedBytesTotal {
		errs = append(errs, fmt.Errorf("reserved bytes per credential %d: want 1024 to the total, %d", c.ReservedBytes, c.ReservedBytesTotal))
	}
	return errors.Join(errs...)
}

// ErrCredentialBudget: the caller's credential holds its share of
// permits or reserved bytes (CredentialCaps); nothing was taken, and
// another credential still gets its first. 429: the caller waits for its
// own permits or reservations to end.
var ErrCredentialBudget = errors.New("this credential holds its share")

// budgetCounts are the counts the leader checks the caps against: the
// state machine keeps them on apply (never a scan), and BudgetsDue says
// some of what they count has reached its expiry and awaits the sweep
// that every lease-family entry makes.
type budgetCounts interface {
	PermitsOfOwner(owner string) int64
	ReservedBytesOfOwner(owner string) int64
	ReservedBytes() int64
	BudgetsDue(now int64) bool
	// LivePermits and PermitsByPolicy are what the operator's views
	// read (Budgets.LivePermits, Budgets.LivePermitsByPolicy).
	LivePermits() []fsm.PermitView
	PermitsByPolicy() map[string]int64
}

// overCap refuses, before the log, a caller whose credential holds its
// share. Counts include what expired but was not swept yet; when some of
// it is due, the entry goes to the log anyway and sweeps (up to the
// state machine's ExpireBudget): a caller whose permits all lapsed is
// never refused for them, and one at its cap gains at most one permit
// per entry while others' lapsed permits wait, each entry sweeping up to
// 256 of them.
func (b *Budgets) overCap(owner string, permits int64, reserve []ReserveItem) error {
	if b.counts == nil {
		return nil
	}
	due := func() bool { return b.counts.BudgetsDue(b.log.leaderNow()) }
	if permits > 0 {
		if n := b.counts.PermitsOfOwner(owner); n+permits > b.caps.Permits && !due() {
			return notCounted(nil, fmt.Errorf("%w: credential %s holds %d permits, its most (this node's --permits-per-credential); release some or wait for their TTLs",
				ErrCredentialBudget, ownerName(owner), n))
		}
	}
	if len(reserve) > 0 {
		size := fsm.ReservationBytes(reserve)
		if n := b.counts.ReservedBytesOfOwner(owner); n+size > b.caps.ReservedBytes && !due() {
			return notCounted(nil, fmt.Errorf("%w: credential %s holds %d bytes of reservations, and this one needs %d more than its %d (this node's --reserved-bytes-per-credential); settle some or wait for their TTLs",
				ErrCredentialBudget, ownerName(owner), n, n+size-b.caps.ReservedBytes, b.caps.ReservedBytes))
		}
		if n := b.counts.ReservedBytes(); n+size > b.caps.ReservedBytesTotal && !due() {
			return notCounted(nil, fmt.Errorf("%w: reservations hold %d bytes, the most the cluster keeps (--reserved-bytes %d); settle or wait",
				ErrConflict, n, b.caps.ReservedBytesTotal))
		}
	}
	return nil
}

func ownerName(owner string) string {
	if owner == "" {
		return "(anonymous)"
	}
	return owner
}
