package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/bbolt"

	"github.com/rlnode/rlnode/internal/boundedfile"
)

// More file names inside a data dir (see BoltFile and WALDir).
const (
	// IdentityFile pins the data dir to one node id.
	IdentityFile = "node.json"
	// SnapshotDir holds raft's file snapshot store.
	SnapshotDir = "snapshots"
	// JoinFile records the log index at which the cluster accepted this
	// node's latest join (cluster/removal.go): configurations at or
	// before it predate this incarnation.
	JoinFile = "join.json"
	// ClaimFile records the bootstrap claim a node accepted
	// (--bootstrap-expect) before it answers it.
	ClaimFile = "bootstrap-claim.json"
)

// logFile holds the stable store (term and vote) in every layout, and the
// log too unless the data dir uses the WAL.
const logFile = BoltFile

// ErrLostState means the data dir has an identity (node.json) but its Raft
// log is gone: the node once was a member, and starting it empty would
// bootstrap a second cluster or vote without remembering its votes.
var ErrLostState = errors.New("raft state lost")

// lostStateError explains ErrLostState in words an operator can act on.
func lostStateError(dir, id, missing string) error {
	return fmt.Errorf("%w: data dir %s has %s (node %q) but no Raft log (%s).\n"+
		"  This node was a member once; starting it empty could form a second cluster or vote\n"+
		"  without memory, so it refuses. If the other members are running, start it again with\n"+
		"  --rejoin-empty --join <members>: its old files are moved aside and it joins as a new\n"+
		"  member, copying the cluster's state. If no member survived, see docs/recovery.md.",
		ErrLostState, dir, IdentityFile, id, missing)
}

// MaxMetaFileBytes is the largest small metadata file of a data dir read
// (identity, bootstrap claim, peer addresses, snapshot meta): each is a
// line or a few of JSON.
const MaxMetaFileBytes = 1 << 20

// ReadIdentity returns the id recorded in dir ("" when there is none).
func ReadIdentity(dir string) (string, error) {
	path := filepath.Join(dir, IdentityFile)
	b, err := boundedfile.Read(path, MaxMetaFileBytes)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", &CorruptError{File: path, Err: err}
	}
	var rec struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.ID == "" {
		return "", &CorruptError{File: path, Err: errors.New(`want {"id":"<node id>"}`)}
	}
	return rec.ID, nil
}

// writeIdentity pins dir to id: a restart with another --id would otherwise
// silently run as a stranger to its own log.
func writeIdentity(dir, id string) error {
	path := filepath.Join(dir, IdentityFile)
	b, _ := json.Marshal(struct {
		ID string `json:"id"`
	}{id})
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// snapshotBase is what raft's file snapshot store is given: it keeps its
// snapshots in <base>/snapshots. New data dirs use <dataDir>/snapshots;
// older ones have <dataDir>/snapshots/snapshots and keep it.
func snapshotBase(dataDir string) string {
	if st, err := os.Stat(filepath.Join(dataDir, SnapshotDir, SnapshotDir)); err == nil && st.IsDir() {
		return filepath.Join(dataDir, SnapshotDir)
	}
	return dataDir
}

// moveAside moves the node's files out of dir into a fresh subdirectory, so
// --rejoin-empty never destroys anything, and returns that directory.
func moveAside(dir string) (string, error) {
	aside := filepath.Join(dir, "discarded-"+time.Now().UTC().Format("20060102T150405Z"))
	moved := false
	for _, name := range []string{IdentityFile, logFile, SnapshotDir, ClaimFile, WALDir, FormatFile, JoinFile} {
		src := filepath.Join(dir, name)
		if _, err := os.Lstat(src); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if !moved {
			if err := os.MkdirAll(aside, 0o755); err != nil {
				return "", fmt.Errorf("move old state aside: %w", err)
			}
			moved = true
		}
		if err := os.Rename(src, filepath.Join(aside, name)); err != nil {
			return "", fmt.Errorf("move %s aside: %w", src, err)
		}
	}
	if !moved {
		return "", nil
	}
	return aside, nil
}

// prepareDataDir checks the identity and the Raft log file before anything
// is opened for writing. It returns whether the node must start empty
// because its old state was moved aside (RejoinEmpty).
func prepareDataDir(cfg Options, log hclog.Logger) (rejoined bool, err error) {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return false, fmt.Errorf("create data dir: %w", err)
	}
	bad := checkDataDir(cfg.Dir, cfg.ID)
	if bad == nil {
		bad = checkFormat(cfg.Dir, cfg.reads(), cfg.Version)
	}
	if bad == nil || errors.Is(bad, ErrLocked) || !cfg.RejoinEmpty {
		if bad == nil && cfg.RejoinEmpty {
			log.Warn("ignoring --rejoin-empty: the data dir has healthy Raft state", "data_dir", cfg.Dir)
		}
		return false, bad
	}
	var wrongID *wrongIDError
	if errors.As(bad, &wrongID) {
		return false, bad
	}
	aside, err := moveAside(cfg.Dir)
	if err != nil {
		return false, err
	}
	log.Warn("rejoining empty: old state moved aside; this node joins as a new member", "reason", bad, "moved_to", aside)
	return true, nil
}

type wrongIDError struct{ dir, have, want string }

func (e *wrongIDError) Error() string {
	return fmt.Sprintf("data dir %s belongs to node %q, not %q: use --id %s or another --data-dir", e.dir, e.have, e.want, e.have)
}

// checkDataDir reports why the data dir must not be opened as it is: a
// wrong or corrupt identity, a lost Raft log, or a damaged Bolt file.
func checkDataDir(dir, wantID string) error {
	id, err := ReadIdentity(dir)
	if err != nil {
		return err
	}
	if id != "" && id != wantID {
		return &wrongIDError{dir: dir, have: id, want: wantID}
	}
	logPath := filepath.Join(dir, logFile)
	_, statErr := os.Stat(logPath)
	switch {
	case errors.Is(statErr, os.ErrNotExist) && id != "":
		return lostStateError(dir, id, logFile)
	case errors.Is(statErr, os.ErrNotExist):
		return nil
	case statErr != nil:
		return &CorruptError{File: logPath, Err: statErr}
	}
	if err := CheckBoltFile(logPath); err != nil {
		return err
	}
	if lost, err := WALMissing(dir); err != nil {
		return &CorruptError{File: logPath, Err: err}
	} else if lost {
		if id == "" {
			return &CorruptError{File: logPath, Err: ErrWALMissing}
		}
		return lostStateError(dir, id, WALDir+"/")
	}
	// A WAL data dir keeps its segment index in a Bolt file too.
	walMeta := filepath.Join(dir, WALDir, "wal-meta.db")
	if _, err := os.Stat(walMeta); err == nil {
		return CheckBoltFile(walMeta)
	}
	return nil
}

// Discard moves a stopped node's state aside (into discarded-<time>/, as
// --rejoin-empty does) so it starts empty: for a node whose cluster says
// it is no longer a member. It returns the directory the files went to
// ("" when there was nothing to move). A data dir another process holds
// open is ErrLocked, and nothing moves.
func Discard(dir string) (string, error) {
	db := filepath.Join(dir, logFile)
	if _, err := os.Stat(db); err == nil {
		b, err := bbolt.Open(db, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 200 * time.Millisecond})
		if errors.Is(err, bbolt.ErrTimeout) {
			return "", fmt.Errorf("%s: %w", db, ErrLocked)
		}
		if err == nil {
			b.Close()
		}
	}
	return moveAside(dir)
}
