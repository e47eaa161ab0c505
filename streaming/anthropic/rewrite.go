package anthropic

import (
	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
)

// AppendNotice returns body with a user message holding text added as the
// last item of the conversation, where a budget notice breaks no cached
// prefix: {"role":"user","content":[{"type":"text","text":...}]} at the end of
// "messages" (the API merges consecutive user turns, so this is valid after
// a user message holding tool results too). Every other byte of body is
// unchanged (streaming.AppendConversation).
func (Dialect) AppendNotice(body []byte, text string) ([]byte, error) {
	return streaming.AppendConversation(streaming.APIAnthropic, body, appendNotice(nil, text))
}

// appendNotice appends the user message holding text.
func appendNotice(dst []byte, text string) []byte {
	dst = append(dst, `{"role":"user","content":[{"type":"text","text":`...)
	dst = jsonscan.AppendQuoted(dst, text)
	return append(dst, "}]}"...)
}
