package responses_test

import (
	"testing"

	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming/responses"
)

// testdata holds the decoder's golden streams.
const testdata = "testdata"

func FuzzResponses(f *testing.F) {
	streamtest.AddStreamSeeds(f, testdata)
	f.Add([]byte("event: error\ndata: {\"type\":\"error\",\"code\":5}\n\n"), uint64(3))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		streamtest.CheckDecodeInvariants(t, responses.Dialect{}, data, seed)
	})
}

func FuzzResponsesJSON(f *testing.F) {
	for _, c := range jsonCases {
		f.Add([]byte(c.Body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { streamtest.CheckDecodeJSONInvariants(t, responses.Dialect{}, body) })
}
