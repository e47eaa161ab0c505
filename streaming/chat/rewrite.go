package chat

import (
	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
)

// AppendNotice returns body with a user message holding text added as the
// last item of the conversation, where a budget notice breaks no cached
// prefix: {"role":"user","content":"..."} at the end of "messages". Every other byte of body is
// unchanged (streaming.AppendConversation).
func (Dialect) AppendNotice(body []byte, text string) ([]byte, error) {
	return streaming.AppendConversation(streaming.APIChat, body, appendNotice(nil, text))
}

// appendNotice appends the user message holding text.
func appendNotice(dst []byte, text string) []byte {
	dst = append(dst, `{"role":"user","content":`...)
	dst = jsonscan.AppendQuoted(dst, text)
	return append(dst, '}')
}
