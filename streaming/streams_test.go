package streaming_test

import (
	"bytes"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
)

// Feeding streams to a Reader and a decoder, in the pieces a network may
// cut them into.

// anthropicTestdata holds the Anthropic decoder's golden streams, which
// the tests here reshape and filter too.
const anthropicTestdata = "anthropic/testdata"

// TestAnthropicSplitInvariance feeds each Anthropic stream whole, byte by
// byte and at random cuts: the Result must not depend on how the bytes
// arrived.
func TestAnthropicSplitInvariance(t *testing.T) { testSplitInvariance(t, streaming.APIAnthropic) }

// TestOpenAISplitInvariance: the same stream decoded whole, byte by byte
// and in random cuts gives the same Result.
func TestOpenAISplitInvariance(t *testing.T) {
	testSplitInvariance(t, streaming.APIChat, streaming.APIResponses)
}

// decoderTestdata is where each decoder's golden streams live.
var decoderTestdata = map[streaming.API]string{
	streaming.APIAnthropic: anthropicTestdata,
	streaming.APIChat:      "chat/testdata",
	streaming.APIResponses: "responses/testdata",
}

// saysOf reads what a stream of each API says, apart from its decoder.
var saysOf = map[streaming.API]func(testing.TB, []byte) streamtest.Says{
	streaming.APIAnthropic: streamtest.AnthropicSays,
	streaming.APIChat:      streamtest.ChatSays,
	streaming.APIResponses: streamtest.ResponsesSays,
}

type says = streamtest.Says

// mustDecode decodes a stream the default Reader accepts with api's
// decoder, with what the stream says read apart from the decoder.
func mustDecode(tb testing.TB, api streaming.API, chunks ...[]byte) (*streaming.Result, says) {
	tb.Helper()
	return streamtest.MustDecode(tb, dialects[api], chunks...), saysOf[api](tb, bytes.Join(chunks, nil))
}

// streamSays reads what stream, of api, says.
func streamSays(tb testing.TB, api streaming.API, stream []byte) says {
	tb.Helper()
	return saysOf[api](tb, stream)
}

// decoderStreams returns, by name, every stream of api the property tests
// run over: the package's testdata and, when present, the recorded
// fixtures.
func decoderStreams(t *testing.T, api streaming.API) map[string][]byte {
	t.Helper()
	streams := map[string][]byte{}
	for _, f := range fixturetest.Glob(t, filepath.Join(decoderTestdata[api], "*.sse")) {
		streams[filepath.Base(f)] = fixturetest.ReadFile(t, f)
	}
	if !fixturetest.Present() {
		return streams
	}
	for name, e := range loadExpected(t) {
		if a, ok := e.decoderAPI(); ok && a == api {
			streams["fixture/"+name] = fixturetest.Read(t, name)
		}
	}
	return streams
}

// testSplitInvariance runs checkSplitInvariance over every stream of apis.
func testSplitInvariance(t *testing.T, apis ...streaming.API) {
	for _, api := range apis {
		streams := decoderStreams(t, api)
		for i, name := range slices.Sorted(maps.Keys(streams)) {
			t.Run(string(api)+"/"+name, func(t *testing.T) {
				streamtest.CheckSplitInvariance(t, dialects[api], streams[name], uint64(i))
			})
		}
	}
}
