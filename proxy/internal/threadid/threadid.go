package threadid

import (
	"crypto/rand"
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

// sessionHeaders are the session headers real agents send: Claude Code
// (and the Claude Agent SDK), Codex, opencode.
var sessionHeaders = []string{"X-Claude-Code-Session-Id", "Session-Id", "Thread-Id", "X-Session-Id", "X-Session-Affinity"}

// maxSessionHeader bounds a session header's value taken as a session id;
// a longer value is taken as none (the request is not refused for it).
const maxSessionHeader = 512

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
		if v := h.Get(name); v != "" && len(v) <= maxSessionHeader {
			return Session(keyHash, v), nil
		}
	}
	return "", nil
}

// Session is the run of the client's own session id hint, scoped to its
// virtual key: the same whether the id came in a header or in the body.
func Session(keyHash [32]byte, hint string) string {
	return "s-" + scoped(keyHash, "session", hint)
}

// Fresh is a new run for a conversation's first turn that names no
// session: two conversations that begin alike are two runs.
func Fresh() string {
	var b [10]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "c-" + hex.EncodeToString(b[:])
}

// Link is the key under which a conversation's later turns find the run
// of the reply marked mark (streaming.ReplyMark, ResponseMark), scoped to
// the virtual key: the marks are the provider's ids of that reply.
func Link(keyHash [32]byte, mark string) string {
	return scoped(keyHash, "link", mark)
}

// Conversation is the run of a later turn whose first turn's run is not
// known (its link expired or was never written): one run per virtual key,
// conversation (fingerprint) and first reply (mark), so that two
// conversations that began alike still part at the reply.
func Conversation(keyHash [32]byte, fingerprint, mark string) string {
	return "c-" + scoped(keyHash, "conversation", fingerprint+"\x00"+mark)
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
