package storage

import (
	"encoding/json"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/rlnode/rlnode/fsm"
	"github.com/rlnode/rlnode/internal/boundedfile"
)

// RecoverPeer is one surviving server in a recovery peers file.
type RecoverPeer struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
	// Voter defaults to true.
	Voter *bool `json:"voter,omitempty"`
}

// maxPeersFileBytes is the largest peers file read.
const maxPeersFileBytes = 1 << 20

// ReadRecoverPeers reads and checks a peers file: a JSON array of
// {"id","raftAddr"} naming every server that survives.
func ReadRecoverPeers(path string) ([]RecoverPeer, error) {
	b, err := boundedfile.Read(path, maxPeersFileBytes)
	if err != nil {
		return nil, err
	}
	var peers []RecoverPeer
	if err := json.Unmarshal(b, &peers); err != nil {
		return nil, fmt.Errorf("%s: want a JSON array of {\"id\":..., \"raftAddr\":...}: %w", path, err)
	}
	if len(peers) == 0 {
		return nil, fmt.Errorf("%s names no server", path)
	}
	seen := map[string]bool{}
	voters := 0
	for _, p := range peers {
		if p.ID == "" || p.RaftAddr == "" {
			return nil, fmt.Errorf("%s: every server needs an id and a raftAddr: %+v", path, p)
		}
		if seen[p.ID] {
			return nil, fmt.Errorf("%s names %s twice", path, p.ID)
		}
		seen[p.ID] = true
		if p.Voter == nil || *p.Voter {
			voters++
		}
	}
	if voters == 0 {
		return nil, fmt.Errorf("%s names no voter", path)
	}
	return peers, nil
}

// Recover rewrites a STOPPED node's Raft configuration to exactly peers,
// with hashicorp/raft's RecoverCluster: the node applies its committed log,
// snapshots it and records the new configuration, so it can elect a leader
// among the survivors once a majority has been lost for good. Every
// surviving server must be recovered with the same peers file.
func Recover(dataDir string, peers []RecoverPeer, logger hclog.Logger) error {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	id, err := ReadIdentity(dataDir)
	if err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("%s has no %s: not an rlnode data dir (or its identity was lost)", dataDir, IdentityFile)
	}
	self := false
	var conf raft.Configuration
	for _, p := range peers {
		s := raft.Voter
		if p.Voter != nil && !*p.Voter {
			s = raft.Nonvoter
		}
		self = self || p.ID == id
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr), Suffrage: s})
	}
	if !self {
		return fmt.Errorf("the peers file does not name this node (%s): list every survivor, this one included", id)
	}
	d, err := Open(Options{Dir: dataDir, ID: id, Logger: logger})
	if err != nil {
		return err
	}
	defer d.Close()
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id)
	rc.Logger = logger.Named("raft")
	_, trans := raft.NewInmemTransport("")
	machine := fsm.New(fsm.Config{})
	err = Guard(d.LogPath(), func() error {
		return raft.RecoverCluster(rc, machine, d.Log, d.Stable, d.Snaps, trans, conf)
	})
	if err != nil {
		return fmt.Errorf("recover %s: %w", dataDir, err)
	}
	logger.Info("recovered", "id", id, "servers", len(conf.Servers))
	return nil
}
