package threadid

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"

	"gatekeeper/trajectory"
)

// MaxSiblings bounds the sibling threads forked for parallel calls on one
// conversation (parallel sampling, identical requests from many clients).
const MaxSiblings = 32

// ErrInvalidHeader: X-Gatekeeper-Trajectory is not a valid trajectory id.
var ErrInvalidHeader = errors.New("X-Gatekeeper-Trajectory must be 1-128 characters of A-Z a-z 0-9 . _ : -")

// sessionHeaders are the session headers real agents send (Claude Code,
// Codex).
var sessionHeaders = []string{"X-Claude-Code-Session-Id", "Session-Id", "Thread-Id"}

// FromHeaders is the run h names: X-Gatekeeper-Trajectory, else the
// client's own session id scoped to its virtual key (keyHash); "" when
// they name none.
func FromHeaders(h http.Header, keyHash [32]byte) (string, error) {
	if id := h.Get("X-Gatekeeper-Trajectory"); id != "" {
		if !trajectory.ValidID(id) {
			return "", ErrInvalidHeader
		}
		return id, nil
	}
	for _, name := range sessionHeaders {
		if v := h.Get(name); v != "" {
			return "s-" + scoped(keyHash, "session", v), nil
		}
	}
	return "", nil
}

// Implicit is the run of a request that names none: its client's session
// (sessionHint, from the body), else one run per virtual key and
// conversation (fingerprint).
func Implicit(keyHash [32]byte, sessionHint, fingerprint string) string {
	if sessionHint != "" {
		return "s-" + scoped(keyHash, "session", sessionHint)
	}
	return "c-" + scoped(keyHash, "conversation", fingerprint)
}

// scoped derives an id from a client-chosen value so that two virtual
// keys sending the same session id never share a trajectory.
func scoped(keyHash [32]byte, kind, v string) string {
	h := sha256.New()
	h.Write(keyHash[:])
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write([]byte(v))
	return hex.EncodeToString(h.Sum(nil)[:10])
}

// Key names the conversation inside a run: the client's own agent id
// where it sends one (Claude Code subagents), with its parent's, else the
// conversation's fingerprint.
func Key(h http.Header, fingerprint string) (key, parentKey string) {
	if id := h.Get("X-Claude-Code-Agent-Id"); id != "" {
		key = "agent:" + id
		if pid := h.Get("X-Claude-Code-Parent-Agent-Id"); pid != "" {
			parentKey = "agent:" + pid
		}
		return key, parentKey
	}
	return "fp:" + fingerprint, ""
}

// Child is the record id of parent's thread of key.
func Child(parent, key string) string {
	sum := sha256.Sum256([]byte(key))
	return parent + "/" + hex.EncodeToString(sum[:6])
}

// Sibling names the n-th sibling thread of base, a child of parent. A
// sibling of the root itself is the root's child.
func Sibling(parent, base string, n int) string {
	if base == parent {
		return base + "/~" + strconv.Itoa(n)
	}
	return base + "~" + strconv.Itoa(n)
}
