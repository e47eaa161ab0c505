package chat_test

import (
	"testing"

	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming/chat"
)

// testdata holds the decoder's golden streams.
const testdata = "testdata"

func FuzzChat(f *testing.F) {
	streamtest.AddStreamSeeds(f, testdata)
	f.Add([]byte("data: {\"choices\":null,\"error\":false}\n\ndata: [DONE]"), uint64(7))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		streamtest.CheckDecodeInvariants(t, chat.Dialect{}, data, seed)
	})
}

func FuzzChatJSON(f *testing.F) {
	for _, c := range jsonCases {
		f.Add([]byte(c.Body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { streamtest.CheckDecodeJSONInvariants(t, chat.Dialect{}, body) })
}
