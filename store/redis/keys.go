package redis

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"gatekeeper/trajectory"
)

// recordSlots is the directory of the slots that hold record indexes (see
// shardDir).
const recordSlots = "gk:{idx}:slots"

// The record indexes of a slot, named by the slot's tag (see slotTags):
// every record of every tree in that slot has its entries there, so the
// script that creates or finishes a record writes them in the same step.
func idxCreated(shard string) string { return "gk:{" + shard + "}:idx:created" }
func idxExpires(shard string) string { return "gk:{" + shard + "}:idx:expires" }

// rootOf is the tree an id belongs to: the part before the first "/".
// Thread records are named "<parent>/<suffix>", so a run's whole tree
// shares its root.
func rootOf(id string) string {
	root, _, _ := strings.Cut(id, "/")
	return root
}

func recKey(id string) string { return "gk:{" + rootOf(id) + "}:rec:" + id }
func evKey(id string) string  { return "gk:{" + rootOf(id) + "}:ev:" + id }

// checkID refuses ids the key layout cannot hold. A brace would move the
// hash tag, and with it the guarantee that a key names exactly one id.
func checkID(id string) error {
	if strings.ContainsAny(id, "{}") {
		return fmt.Errorf("%w: id %q contains a brace, which Redis keys reserve for the hash tag", trajectory.ErrInvalidRecord, id)
	}
	return nil
}

// memberLen is the length of an index member's time prefix plus its ':'.
const memberLen = 24 + 1

// member is a record's entry in the created index: its creation time,
// inverted so the newest sorts first, then its id, so that ties sort by id
// ascending. All members share score 0 and are read in lexical order,
// which keeps full nanosecond precision where a float score would not.
func member(id string, created time.Time) string {
	var b [12]byte
	// Flipping the sign bit maps int64 order onto uint64 order; the outer
	// complement reverses it.
	binary.BigEndian.PutUint64(b[:8], ^(uint64(created.Unix()) ^ 1<<63))
	binary.BigEndian.PutUint32(b[8:], uint32(999_999_999-created.Nanosecond()))
	return hex.EncodeToString(b[:]) + ":" + id
}

// memberID is the id a member names, or "" if m is not a member.
func memberID(m string) string {
	if len(m) <= memberLen || m[memberLen-1] != ':' {
		return ""
	}
	return m[memberLen:]
}
