package streaming

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// How a conversation that names no session is followed from turn to
// turn: its first turn holds no reply of the model's (Request.Replied is
// false), and each later turn replays the model's first reply, which
// Request.FirstReply names the way ReplyMark names a decoded reply. Two
// conversations that began with the same prompt part at that reply: its
// tool call ids are the provider's own, unique to it (a Gemini reply's
// calls often have none; the thought signature of its first call part,
// which the client sends back, is unique to it as well).

// MaxSessionHint bounds the session id a body carries (SessionHint): a
// longer value is no session id a real client sends, and is taken as
// none.
const MaxSessionHint = 512

// maxMarkID bounds a call id kept whole in a mark; a longer one is kept as
// its digest.
const maxMarkID = 256

// CallMark is the mark of a reply whose first client tool call has id.
func CallMark(id string) string {
	if id == "" {
		return ""
	}
	if len(id) > maxMarkID {
		sum := sha256.Sum256([]byte(id))
		return "call#" + hex.EncodeToString(sum[:16])
	}
	return "call:" + id
}

// TextMark is the mark of a reply without client tool calls whose text
// (its text parts, in order, decoded) has xxhash64 digest.
func TextMark(digest uint64) string {
	return "text:" + strconv.FormatUint(digest, 16)
}

// ResponseMark is the mark of a Responses reply by its id, which a later
// turn names as its previous_response_id.
func ResponseMark(id string) string {
	if id == "" {
		return ""
	}
	if len(id) > maxMarkID {
		sum := sha256.Sum256([]byte(id))
		return "resp#" + hex.EncodeToString(sum[:16])
	}
	return "resp:" + id
}

// SignatureMark is the mark of a Gemini reply whose first call part
// carries the thought signature sig (always kept as its digest: a
// signature runs to kilobytes).
func SignatureMark(sig string) string {
	if sig == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(sig))
	return "sig#" + hex.EncodeToString(sum[:16])
}

// ReplyMark is the mark of the decoded reply res: the thought signature of
// its first call part where it has one (Gemini), else its first client
// tool call's id (of the first choice); "" when it has none.
func ReplyMark(res *Result) string {
	if res.CallSignature != "" {
		return SignatureMark(res.CallSignature)
	}
	for _, tc := range res.ToolCalls {
		if !tc.Server && tc.Choice == 0 && tc.ID != "" {
			return CallMark(tc.ID)
		}
	}
	return ""
}
