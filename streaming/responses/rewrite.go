package responses

import (
	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
)

// AppendNotice returns body with a user message holding text added as the
// last item of the conversation, where a budget notice breaks no cached
// prefix: {"type":"message","role":"user","content":[{"type":"input_text","text":...}]}
// at the end of "input"; an "input" string becomes the array
// [{"role":"user","content":<the string's raw bytes>}, notice]. Every other byte of body is
// unchanged (streaming.AppendConversation).
func (Dialect) AppendNotice(body []byte, text string) ([]byte, error) {
	return streaming.AppendConversation(streaming.APIResponses, body, appendNotice(nil, text))
}

// appendNotice appends the user message holding text.
func appendNotice(dst []byte, text string) []byte {
	dst = append(dst, `{"type":"message","role":"user","content":[{"type":"input_text","text":`...)
	dst = jsonscan.AppendQuoted(dst, text)
	return append(dst, "}]}"...)
}
