package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
)

// The budgets without a cluster: a real state machine that a log of one
// writer applies to at once, a route that is the leader itself, and a
// hand-moved clock.
type budgetBench struct {
	mu    sync.Mutex
	f     *fsm.FSM
	index uint64
	now   int64
}

func (l *budgetBench) apply(data []byte) any {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index++
	return l.f.Apply(&raft.Log{Index: l.index, Term: 1, Type: raft.LogCommand, Data: data})
}

func (l *budgetBench) applyBudget(encode func(now int64) []byte) (any, error) {
	return l.apply(encode(l.now)), nil
}

func (l *budgetBench) RequireFormat(fsm.Format) error { return nil }

func (l *budgetBench) leaderNow() int64 { return l.now }

func (l *budgetBench) Policy(name string) (policy.Policy, bool) { return l.f.Policy(name) }

// localRoute is the leader's own route: the operation's input check, then
// the leader's run, as leaderOp.do does on the leader.
type localRoute struct{ b *Budgets }

func (r localRoute) permit(_ context.Context, w permitWire) (Permit, error) {
	if err := w.check(); err != nil {
		return Permit{}, err
	}
	return r.b.permitLocal(w)
}

func (r localRoute) reservation(_ context.Context, w reservationWire) (reservationAnswer, error) {
	if err := w.check(); err != nil {
		return reservationAnswer{}, err
	}
	return r.b.reservationLocal(w)
}

func testBudgets(t *testing.T, ps ...policy.Policy) (*Budgets, *budgetBench) {
	t.Helper()
	bench := &budgetBench{f: fsm.New(fsm.Config{OnFatal: func(err error) { t.Errorf("fsm halted: %v", err) }}), now: 1_700_000_000_000}
	if res := bench.apply(fsm.EncodeSetPolicies(fsm.SetUpsert, ps)); res != nil {
		if err, ok := res.(error); ok {
			t.Fatal(err)
		}
	}
	b := newBudgets(nil, bench, bench, 5*time.Minute, CredentialCaps{}, bench.f)
	b.route = localRoute{b}
	return b, bench
}

func concurrency(name string, n int64) policy.Policy {
	return policy.Policy{Name: name, Algorithm: policy.Concurrency, Limits: []policy.Limit{{Limit: n}}}
}

// TestBudgetsPermitsWithoutACluster: acquire up to the limit, a refused
// acquire says when to retry, release and renew only by the owner, and
// every refusal of the request is typed and names its field.
func TestBudgetsPermitsWithoutACluster(t *testing.T) {
	b, bench := testBudgets(t, concurrency("jobs", 2), policy.Fixed("fw", 10, time.Minute))
	ctx := context.Background()
	var ids []string
	for i := range 2 {
		p, err := b.AcquirePermit(ctx, PermitRequest{Policy: "jobs", Client: "u", Owner: "token-a", TTL: time.Minute})
		if err != nil || !p.Acquired || len(p.ID) != 32 || p.Live != int64(i+1) {
			t.Fatalf("acquire %d: %+v %v", i, p, err)
		}
		ids = append(ids, p.ID)
	}
	if p, err := b.AcquirePermit(ctx, PermitRequest{Policy: "jobs", Client: "u", Owner: "token-a"}); err != nil || p.Acquired || p.RetryAt != bench.now+60_000 {
		t.Fatalf("third of 2: %+v %v", p, err)
	}
	if _, err := b.ReleasePermit(ctx, ids[0], "token-b"); !errors.Is(err, ErrNotFound) || !errors.Is(err, ErrNotCounted) {
		t.Fatalf("release with another owner: %v", err)
	}
	if p, err := b.RenewPermit(ctx, ids[0], "token-a", 2*time.Minute); err != nil || p.ExpiresAt != bench.now+120_000 {
		t.Fatalf("renew: %+v %v", p, err)
	}
	if p, err := b.ReleasePermit(ctx, ids[0], "token-a"); err != nil || p.Live != 1 {
		t.Fatalf("release: %+v %v", p, err)
	}
	for _, c := range []struct {
		req   PermitRequest
		kind  error
		field string
	}{
		{PermitRequest{Policy: "nope", Client: "u"}, ErrUnknownPolicy, "policy"},
		{PermitRequest{Policy: "fw", Client: "u"}, ErrWrongPolicy, "policy"},
		{PermitRequest{Policy: "jobs", Client: "u", TTL: time.Hour}, ErrTTLOverBound, "ttl"},
		{PermitRequest{Policy: "jobs", Client: ""}, ErrBadRequest, "client"},
		{PermitRequest{Policy: "bad name", Client: "u"}, ErrBadRequest, "policy"},
	} {
		_, err := b.AcquirePermit(ctx, c.req)
		var re *RequestError
		if !errors.As(err, &re) || re.Kind != c.kind || re.Field != c.field || !errors.Is(err, ErrNotCounted) || !isFinal(err) {
			t.Errorf("%+v: %v, want a final %v naming %s", c.req, err, c.kind, c.field)
		}
	}
	if n := len(bench.f.LivePermits()); n != 1 {
		t.Fatalf("%d permits live after the refusals, want 1", n)
	}
}

// TestBudgetsReservationsWithoutACluster: all or nothing, a settle gives
// back the difference once, and fields are named as the caller wrote
// them (one key, or keys[i]).
func TestBudgetsReservationsWithoutACluster(t *testing.T) {
	b, _ := testBudgets(t, policy.Fixed("in", 1000, time.Hour), policy.Fixed("usd", 10, time.Hour), concurrency("jobs", 1))
	ctx := context.Background()
	r, err := b.Reserve(ctx, ReserveRequest{Owner: "token-a", TTL: time.Minute, Items: []ReserveItem{{Policy: "in", Client: "u", Units: 400}, {Policy: "usd", Client: "u", Units: 4}}})
	if err != nil || !r.Reserved || len(r.ID) != 32 {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	if r2, err := b.Reserve(ctx, ReserveRequest{Items: []ReserveItem{{Policy: "in", Client: "u", Units: 1}, {Policy: "usd", Client: "u", Units: 7}}}); err != nil || r2.Reserved {
		t.Fatalf("reserve past usd's limit: %+v %v", r2, err)
	}
	s, err := b.Settle(ctx, r.ID, "token-a", 1)
	if err != nil || s.Refunded[1] != 3 || s.Overdraft != 0 {
		t.Fatalf("settle: %+v %v", s, err)
	}
	if _, err := b.Settle(ctx, r.ID, "token-a", 1); !errors.Is(err, ErrAlreadySettled) {
		t.Fatalf("second settle: %v", err)
	}
	if _, err := b.Settle(ctx, "not-an-id", "token-a", 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("settle of a malformed id: %v", err)
	}
	for _, c := range []struct {
		req   ReserveRequest
		kind  error
		field string
	}{
		{ReserveRequest{Single: true, Items: []ReserveItem{{Policy: "jobs", Client: "u", Units: 1}}}, ErrWrongPolicy, "policy"},
		{ReserveRequest{Items: []ReserveItem{{Policy: "in", Client: "u", Units: 1}, {Policy: "nope", Client: "u", Units: 1}}}, ErrUnknownPolicy, "keys[1].policy"},
		{ReserveRequest{Single: true, Items: []ReserveItem{{Policy: "in", Client: "u", Units: 0}}}, ErrBadRequest, "units"},
		{ReserveRequest{Items: []ReserveItem{{Policy: "in", Client: "", Units: 1}}}, ErrBadRequest, "keys[0].client"},
		{ReserveRequest{TTL: 3 * time.Hour, Items: []ReserveItem{{Policy: "in", Client: "u", Units: 1}}}, ErrTTLOverBound, "ttl"},
		{ReserveRequest{}, ErrBadRequest, "keys"},
		// Never fits (issue 35, item 11): units above the limit, or
		// items of one key summing above it.
		{ReserveRequest{Single: true, Items: []ReserveItem{{Policy: "in", Client: "u", Units: 1001}}}, ErrNeverFits, "units"},
		{ReserveRequest{Items: []ReserveItem{{Policy: "usd", Client: "u", Units: 6}, {Policy: "usd", Client: "u", Units: 5}}}, ErrNeverFits, "keys[1].units"},
	} {
		_, err := b.Reserve(ctx, c.req)
		var re *RequestError
		if !errors.As(err, &re) || re.Kind != c.kind || re.Field != c.field || !strings.HasPrefix(err.Error(), c.field+": ") {
			t.Errorf("%+v: %v, want %v naming %s", c.req, err, c.kind, c.field)
		}
	}
}

// TestBudgetsCredentialShares: a credential past its share of permits or
// reserved bytes is refused before the log (nothing written), another
// credential still gets its first, and permits that lapsed do not hold
// their owner back once they are due.
func TestBudgetsCredentialShares(t *testing.T) {
	b, bench := testBudgets(t, concurrency("jobs", 1000), policy.Fixed("in", 1_000_000, time.Hour))
	b.caps = CredentialCaps{Permits: 3, ReservedBytes: 2048, ReservedBytesTotal: 1 << 20}
	ctx := context.Background()
	for i := range 3 {
		if p, err := b.AcquirePermit(ctx, PermitRequest{Policy: "jobs", Client: fmt.Sprint(i), Owner: "addr-10.0.0.1", TTL: time.Second}); err != nil || !p.Acquired {
			t.Fatalf("acquire %d: %+v %v", i, p, err)
		}
	}
	index := bench.index
	_, err := b.AcquirePermit(ctx, PermitRequest{Policy: "jobs", Client: "x", Owner: "addr-10.0.0.1", TTL: time.Second})
	if !errors.Is(err, ErrCredentialBudget) || !errors.Is(err, ErrNotCounted) || !strings.Contains(err.Error(), "addr-10.0.0.1") || bench.index != index {
		t.Fatalf("a fourth permit of a share of 3: %v (entries written: %d)", err, bench.index-index)
	}
	if p, err := b.AcquirePermit(ctx, PermitRequest{Policy: "jobs", Client: "x", Owner: "token-abc"}); err != nil || !p.Acquired {
		t.Fatalf("another credential's first: %+v %v", p, err)
	}
	bench.now += 1000 // the three lapse: due, not swept yet
	if p, err := b.AcquirePermit(ctx, PermitRequest{Policy: "jobs", Client: "x2", Owner: "addr-10.0.0.1"}); err != nil || !p.Acquired {
		t.Fatalf("after its permits lapsed: %+v %v", p, err)
	}
	long := func(i int) []ReserveItem {
		return []ReserveItem{{Policy: "in", Client: fmt.Sprintf("%d-%s", i, strings.Repeat("x", 250)), Units: 1}}
	}
	made := 0
	for i := range 10 {
		_, err := b.Reserve(ctx, ReserveRequest{Owner: "addr-10.0.0.1", TTL: time.Minute, Items: long(i)})
		if errors.Is(err, ErrCredentialBudget) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		made++
	}
	if made == 0 || made > 2048/(250+64) {
		t.Fatalf("%d reservations of a 250-byte key within 2048 bytes", made)
	}
	if _, err := b.Reserve(ctx, ReserveRequest{Owner: "token-abc", TTL: time.Minute, Items: long(99)}); err != nil {
		t.Fatalf("another credential's reservation: %v", err)
	}
}
