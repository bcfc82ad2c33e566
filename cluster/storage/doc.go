// Package storage owns a node's data dir: its identity (node.json), the
// Raft log and stable store in one of two kinds, the snapshot store, the
// checks that refuse lost or damaged state before anything is opened for
// writing, moving state aside for --rejoin-empty, recovery of a stopped node
// (RecoverCluster) and converting a stopped node's log from one kind to the
// other.
//
// Layout of a data dir:
//
//	bolt: raft.db holds the log and the stable store (raft-boltdb/v2).
//	wal:  wal/ holds the log (hashicorp/raft-wal segments and its own
//	      wal-meta.db); raft.db holds the stable store only.
//	both: node.json (the node id), snapshots/ (raft's file snapshot
//	      store) and, during --bootstrap-expect, bootstrap-claim.json;
//	      format.json once the cluster's format was raised past 3 (the
//	      newest log format the dir may hold: a build that reads less
//	      refuses the dir).
//
// The kind is read from the disk: a wal/ directory means wal, else a raft.db
// means bolt, else the dir is new. Both layouts keep raft.db, so the stable
// store (term and vote) never moves and a conversion switches kind with one
// rename. A wal data dir's raft.db also carries a marker key, so a raft.db
// whose wal/ went missing reads as a lost log (ErrWALMissing), never as a
// Bolt data dir with an empty log: such a node would vote without the
// entries it once acknowledged.
//
// A full disk is not damage: an error that comes from one (IsDiskFull) is a
// *DiskFullError telling the operator to free space, and --rejoin-empty
// never moves such a dir aside. Snapshot "*.tmp" directories left by a
// snapshot that failed part-way are removed when the dir is opened.
package storage
