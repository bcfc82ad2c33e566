package cluster

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rlnode/rlnode/fsm"
)

// ErrClusterUpgrading marks a write the leader refused before the log
// because it needs a log or snapshot format that some voter cannot apply
// yet (the cluster version gate, cluster/DESIGN.md): nothing changed, and
// the same write succeeds once every voter runs a release that knows it.
var ErrClusterUpgrading = errors.New("the cluster is being upgraded")

// UpgradingError is the gate's refusal: the format the write needs, the
// cluster's effective format, and the voters behind (a voter whose format
// is unknown counts as behind).
type UpgradingError struct {
	Need      fsm.Format
	Effective fsm.Format
	Behind    []string
}

func (e *UpgradingError) Error() string {
	return fmt.Sprintf("%v: this write needs log format %d on every voter, the cluster runs format %d (behind: %s); upgrade them first",
		ErrClusterUpgrading, e.Need, e.Effective, strings.Join(e.Behind, ", "))
}

func (e *UpgradingError) Unwrap() error { return ErrClusterUpgrading }

// RequireFormat returns nil when every voter can apply entries of format
// need, else an *UpgradingError. Call it on the leader, before the log,
// for any write that needs more than fsm.OldestFormat.
func (n *Node) RequireFormat(need fsm.Format) error {
	if need <= fsm.OldestFormat {
		return nil
	}
	eff, behind := n.effectiveFormat()
	if need <= eff {
		return nil
	}
	return &UpgradingError{Need: need, Effective: eff, Behind: behind}
}

// effectiveFormat is the lowest format any voter supports, and the voters
// below the newest. Until voters report their formats (the version gate's
// work), every other voter is unknown and counts as old.
func (n *Node) effectiveFormat() (fsm.Format, []string) {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return fsm.OldestFormat, []string{"(configuration unknown)"}
	}
	var behind []string
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == 0 && string(s.ID) != n.cfg.ID { // raft.Voter
			behind = append(behind, string(s.ID))
		}
	}
	if len(behind) == 0 {
		return fsm.CurrentFormat, nil
	}
	return fsm.OldestFormat, behind
}
