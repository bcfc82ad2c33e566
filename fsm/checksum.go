package fsm

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/hashicorp/raft"
)

// A log entry's payload carries a CRC-32C in the entry's Extensions, which
// raft stores and replicates beside Data but never interprets. Neither
// raft-boltdb nor raft-wal checks a stored value when it is read again, and
// a payload with flipped bytes can still decode, as hits on another client
// id: one replica would then count differently from the others without
// anyone noticing. With the sum, Apply halts that replica instead, and the
// start-up check of the data dir refuses it.
//
// The sum lives in Extensions, not in Data, so the entry format is
// unchanged: a release without this check applies these entries as before,
// and entries written before it (no Extensions) apply unchecked.
//
//	Extensions: 'r', version 1, CRC-32C of Data (4 bytes, little endian)
//
// A later form takes another tag byte, so that an 'r' that does not read
// as this form is damage.
const (
	sumTag     byte = 'r'
	sumVersion byte = 1
	sumLen          = 6
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrChecksum marks an entry whose payload does not match its checksum: the
// entry is damaged on this node, not unknown to it.
var ErrChecksum = fmt.Errorf("%w: checksum mismatch", ErrCorrupt)

// Sealed is the log entry a leader proposes for data: data with its
// checksum.
func Sealed(data []byte) raft.Log {
	ext := make([]byte, 0, sumLen)
	ext = append(ext, sumTag, sumVersion)
	ext = binary.LittleEndian.AppendUint32(ext, crc32.Checksum(data, castagnoli))
	return raft.Log{Type: raft.LogCommand, Data: data, Extensions: ext}
}

// VerifyChecksum checks a command entry's payload against its checksum.
// Entries without one (written before checksums, or by another tool) and
// extensions of another kind pass.
func VerifyChecksum(l *raft.Log) error {
	ext := l.Extensions
	if l.Type != raft.LogCommand || len(ext) == 0 || ext[0] != sumTag {
		return nil
	}
	if len(ext) != sumLen || ext[1] != sumVersion {
		return fmt.Errorf("%w: entry %d has a checksum of an unknown form (% x)", ErrChecksum, l.Index, ext)
	}
	want := binary.LittleEndian.Uint32(ext[2:])
	if got := crc32.Checksum(l.Data, castagnoli); got != want {
		return fmt.Errorf("%w: entry %d fails its checksum (stored %08x, payload sums to %08x): its bytes changed on disk or in transit", ErrChecksum, l.Index, want, got)
	}
	return nil
}
