package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/policy"
)

// fsmLeader is a leader's log reduced to a real state machine: entries
// apply at once, a restore loads the backup into it.
type fsmLeader struct {
	f        *fsm.FSM
	index    uint64
	restores int
}

func (l *fsmLeader) IsLeader() bool                    { return true }
func (l *fsmLeader) readBarrier(context.Context) error { return nil }
func (l *fsmLeader) forwardBackup(context.Context, io.Writer) error {
	return errors.New("a leader does not forward")
}
func (l *fsmLeader) forwardRestore(context.Context, io.Reader, int64, bool) (Restored, error) {
	return Restored{}, errors.New("a leader does not forward")
}
func (l *fsmLeader) restoreSnapshot(_ *raft.SnapshotMeta, r io.Reader, _ time.Duration) error {
	l.restores++
	return l.f.Restore(io.NopCloser(r))
}
func (l *fsmLeader) apply(data []byte, _ time.Duration) raft.ApplyFuture {
	l.index++
	return appliedFuture{l.f.Apply(&raft.Log{Index: l.index, Term: 1, Type: raft.LogCommand, Data: data})}
}

type appliedFuture struct{ res any }

func (f appliedFuture) Error() error  { return nil }
func (f appliedFuture) Index() uint64 { return 0 }
func (f appliedFuture) Response() any { return f.res }

func newTestBackups(t *testing.T, seed ...policy.Policy) (*Backups, *fsmLeader) {
	l := &fsmLeader{f: fsm.New(fsm.Config{})}
	return &Backups{id: "n1", dataDir: t.TempDir(), seed: seed, applyTimeout: time.Second,
		state: l.f, node: l, policyMu: new(sync.Mutex), log: hclog.NewNullLogger()}, l
}

func testPolicy(t *testing.T, name string, limit int64) policy.Policy {
	t.Helper()
	p := policy.Policy{Name: name, Algorithm: "fixed_window", Limits: []policy.Limit{{Limit: limit, Window: policy.Duration(time.Minute)}}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// A restore goes only into a new cluster (unless forced), only of a whole
// backup, and keeps the restoring cluster's own node addresses: each
// refusal leaves the state as it was and never reaches raft.
func TestBackupsRestoreChecksBeforeRaft(t *testing.T) {
	seed := testPolicy(t, "default", 10)
	src, srcLog := newTestBackups(t, seed)
	srcLog.apply(fsm.EncodeSetPolicies(fsm.SetUpsert, []policy.Policy{seed, testPolicy(t, "api", 5)}), 0)
	srcLog.apply(fsm.EncodeCounter(time.Now().UnixMilli(), fsm.Counter{Kind: fsm.CounterSet, Policy: "api", Client: "alice", N: 3}), 0)
	srcLog.apply(fsm.EncodeSetNode(fsm.Node{ID: "old", RaftAddr: "old:7000", HTTPAddr: "old:8080"}), 0)
	var backup bytes.Buffer
	if err := src.backup(context.Background(), &backup); err != nil {
		t.Fatal(err)
	}
	if w, err := checkBackup(bytes.NewReader(backup.Bytes())); err != nil || w != 1 {
		t.Fatalf("the backup holds %d windows (%v), want alice's one", w, err)
	}

	// The source holds a window and a policy not in its seed: not new.
	_, err := src.restore(context.Background(), bytes.NewReader(backup.Bytes()), int64(backup.Len()), false)
	if !errors.Is(err, ErrNotEmpty) || !strings.Contains(err.Error(), "1 windows") || srcLog.restores != 0 {
		t.Fatalf("restore into a cluster with windows: %v (raft restores %d)", err, srcLog.restores)
	}
	custom, customLog := newTestBackups(t, seed)
	customLog.apply(fsm.EncodeSetPolicies(fsm.SetUpsert, []policy.Policy{testPolicy(t, "default", 99)}), 0)
	if _, err := custom.restore(context.Background(), bytes.NewReader(backup.Bytes()), int64(backup.Len()), false); !errors.Is(err, ErrNotEmpty) || !strings.Contains(err.Error(), "(default)") {
		t.Fatalf("restore into a cluster whose default policy was changed: %v", err)
	}

	dst, dstLog := newTestBackups(t, seed)
	dstLog.apply(fsm.EncodeSetNode(fsm.Node{ID: "n1", RaftAddr: "n1:7000", HTTPAddr: "n1:8080"}), 0)
	for name, body := range map[string][]byte{"not a backup": []byte("not a backup"), "cut short": backup.Bytes()[:backup.Len()/2]} {
		if _, err := dst.restore(context.Background(), bytes.NewReader(body), int64(len(body)), true); !errors.Is(err, ErrInvalidBackup) || dstLog.restores != 0 {
			t.Fatalf("%s: %v (raft restores %d), want ErrInvalidBackup before raft", name, err, dstLog.restores)
		}
	}
	if _, err := dst.restore(context.Background(), strings.NewReader(""), MaxBackupBytes+1, true); !errors.Is(err, ErrInvalidBackup) {
		t.Fatalf("a body over the bound: %v", err)
	}
	if _, err := dst.restore(context.Background(), bytes.NewReader(backup.Bytes()), int64(backup.Len())+1, true); err == nil || dstLog.restores != 0 {
		t.Fatalf("a body shorter than its length: %v", err)
	}

	res, err := dst.restore(context.Background(), bytes.NewReader(backup.Bytes()), int64(backup.Len()), false)
	if err != nil || res.LiveWindows != 1 || res.ServedBy != "n1" || dstLog.restores != 1 {
		t.Fatalf("restore into a new cluster: %+v %v (raft restores %d)", res, err, dstLog.restores)
	}
	nodes := dstLog.f.Nodes()
	if _, ok := nodes["old"]; ok || nodes["n1"].HTTPAddr != "n1:8080" {
		t.Fatalf("node metadata after the restore: %+v, want this cluster's own n1 and not the backup's old", nodes)
	}
	if _, ok := dstLog.f.Policy("api"); !ok {
		t.Fatal("the backup's policy is not in the restored table")
	}
}
