package fsm

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRestoreVersion3Snapshot restores the snapshot the previous release
// (bd9eb85, format 3) wrote as a real node (testdata/v3-snapshot.bin, made
// by scripts/make-v3-fixture.sh with testdata/README.md's recipe): every
// algorithm's policy, their windows, and two live lease grants must come
// back, go on deciding, and be written again as today's version.
func TestRestoreVersion3Snapshot(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "v3-snapshot.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if b[4] != snapshotV3 {
		t.Fatalf("fixture is version %d, want 3", b[4])
	}
	tf := newTestFSM(t)
	if err := tf.f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	tf.index = tf.f.Stats().AppliedIndex
	now := tf.f.Stats().AppliedNow

	var names []string
	for _, p := range tf.f.Policies() {
		names = append(names, p.String())
	}
	want := map[string]string{"default": "fixed_window", "fw": "fixed_window", "epoch": "fixed_window",
		"sw": "sliding_window", "tb": "token_bucket", "api": "fixed_window"}
	if len(names) != len(want) {
		t.Fatalf("restored %d policies, want %d: %s", len(names), len(want), names)
	}
	for name, alg := range want {
		p, ok := tf.f.Policy(name)
		if !ok || p.Algorithm != alg {
			t.Fatalf("policy %s after restore: %+v %v; want %s", name, p, ok, alg)
		}
	}
	if p, _ := tf.f.Policy("api"); !p.IsLeased() {
		t.Fatal("policy api lost consistency: leased")
	}
	if p, _ := tf.f.Policy("epoch"); p.Align != "epoch" {
		t.Fatalf("policy epoch lost align: epoch (%q)", p.Align)
	}
	if p, _ := tf.f.Policy("sw"); len(p.Limits) != 2 {
		t.Fatalf("policy sw has %d limits, want 2", len(p.Limits))
	}
	if p, _ := tf.f.Policy("tb"); p.Limits[0].Burst != 8 {
		t.Fatalf("policy tb's burst is %d, want 8", p.Limits[0].Burst)
	}

	// The windows: hits taken before the snapshot (bob's fw hit came after
	// it, in the log only).
	for _, c := range []struct {
		policy, client string
		used           int64
	}{{"fw", "alice", 3}, {"epoch", "alice", 1}, {"sw", "alice", 2}} {
		v, ok := tf.f.Lookup(c.policy, c.client)
		if !ok || !v.Stored || v.States[0].B != c.used {
			t.Fatalf("%s/%s after restore: %+v; want %d used", c.policy, c.client, v, c.used)
		}
	}
	if v, _ := tf.f.Lookup("fw", "bob"); v.Stored {
		t.Fatal("fw/bob has a window, but the fixture hit it only after the snapshot")
	}
	if r := tf.check(now+1, nil, h2("fw", "alice", 3)).Hits[0]; r.Counted {
		t.Fatal("fw/alice allowed 3 more with 3 of 5 spent")
	}
	if r := tf.check(now+1, nil, h2("fw", "alice", 2)).Hits[0]; !r.Counted || r.Parts[0].Remaining != 0 {
		t.Fatalf("fw/alice's last 2: %+v", r)
	}
	// The token bucket: 4 of a burst of 8 taken moments before the snapshot.
	if r := tf.check(now+1, nil, h2("tb", "alice", 5)).Hits[0]; r.Counted {
		t.Fatal("tb/alice allowed 5 with about 4 of 8 left")
	}
	if r := tf.check(now+1, nil, h2("tb", "alice", 4)).Hits[0]; !r.Counted {
		t.Fatalf("tb/alice refused the 4 left: %+v", r)
	}

	// The two grants of api/bob (30 to h1, 20 to h2, 60 s leases) are live
	// and count as spent: 50 of 100 are left to grant.
	gs := tf.f.OutstandingGrants()
	if len(gs) != 2 {
		t.Fatalf("outstanding grants after restore: %+v; want 2", gs)
	}
	units := map[string]int64{}
	for _, g := range gs {
		if g.Policy != "api" || g.Client != "bob" || g.Exp <= now {
			t.Fatalf("grant %+v", g)
		}
		units[g.Holder[strings.LastIndex(g.Holder, "h"):]] = g.Units
	}
	if units["h1"] != 30 || units["h2"] != 20 {
		t.Fatalf("grant units by holder: %v; want h1 30, h2 20", units)
	}
	granted := int64(0)
	for i := 0; i < 10; i++ {
		g := tf.grant(now+1, "h3", 1000, GrantItem{"api", "bob", 80}).Grants[0]
		if g.Units == 0 {
			break
		}
		granted += g.Units
	}
	if granted != 50 {
		t.Fatalf("granted %d in all to a new holder; the old grants left 50", granted)
	}
	// h1 gives back 10 of its grant: the return finds the old grant.
	h1 := gs[0]
	if !strings.HasSuffix(h1.Holder, "h1") {
		h1 = gs[1]
	}
	if r := tf.giveBack(now+2, h1.Holder, ReturnItem{"api", "bob", h1.Index, 10}); r.Returned[0] != 10 {
		t.Fatalf("h1 returned %d of 10", r.Returned[0])
	}

	// Written again (version 3 still: nothing of version 4 is live), it restores to the same digest.
	out := persistSnapshot(t, tf.f).Bytes()
	if out[4] < snapshotV3 {
		t.Fatalf("a new snapshot is version %d", out[4])
	}
	again := newTestFSM(t)
	if err := again.f.Restore(io.NopCloser(bytes.NewReader(out))); err != nil {
		t.Fatal(err)
	}
	if digestOf(again.f) != digestOf(tf.f) {
		t.Fatal("the round trip of the restored v3 state changed its digest")
	}
}
