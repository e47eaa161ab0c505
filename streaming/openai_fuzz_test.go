package streaming_test

import (
	"errors"
	"testing"

	"gatekeeper/internal/streamtest"
	. "gatekeeper/streaming"
)

// TestOpenAISplitInvariance: the same stream decoded whole, byte by byte
// and in random cuts gives the same Result.
func TestOpenAISplitInvariance(t *testing.T) { testSplitInvariance(t, APIChat, APIResponses) }

// openAIFuzzStream checks what must hold for any input: no panic, the
// same Result however the bytes are cut, memory bounded by the input, and
// a Truncated flag that follows the rules.
func openAIFuzzStream(t *testing.T, api API, data []byte, seed uint64) {
	if len(data) > 1<<16 {
		return
	}
	whole, ok := streamtest.DecodeSplit(t, dialects[api], data, seed)
	if !ok {
		return // the Reader refused the input; nothing reached the decoder
	}
	var args int
	for _, tc := range whole.ToolCalls {
		args += len(tc.Arguments)
	}
	if args > len(data) || len(whole.ToolCalls) > len(data) || whole.OutputBytes > int64(len(data)) {
		t.Fatalf("%d argument bytes, %d calls, %d output bytes from %d input bytes", args, len(whole.ToolCalls), whole.OutputBytes, len(data))
	}
	if len(whole.UnparsedErrors) > MaxUnparsedErrors || len(whole.UnparsedErrors) > whole.Unparsed {
		t.Fatalf("%d unparsed errors kept for %d unparsed", len(whole.UnparsedErrors), whole.Unparsed)
	}
	for _, e := range whole.UnparsedErrors {
		if !errors.Is(e, ErrInvalidJSON) {
			t.Fatalf("unparsed error %v is not ErrInvalidJSON", e)
		}
	}
	if whole.Truncated == (whole.Done || len(whole.Errors) > 0) {
		t.Fatalf("Truncated = %v with Done = %v and %d errors", whole.Truncated, whole.Done, len(whole.Errors))
	}
}

func FuzzChat(f *testing.F) {
	streamtest.AddStreamSeeds(f, decoderTestdata[APIChat])
	f.Add([]byte("data: {\"choices\":null,\"error\":false}\n\ndata: [DONE]"), uint64(7))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		openAIFuzzStream(t, APIChat, data, seed)
	})
}

func FuzzResponses(f *testing.F) {
	streamtest.AddStreamSeeds(f, decoderTestdata[APIResponses])
	f.Add([]byte("event: error\ndata: {\"type\":\"error\",\"code\":5}\n\n"), uint64(3))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		openAIFuzzStream(t, APIResponses, data, seed)
	})
}

// openAIFuzzJSON checks a non-streaming decoder: no panic, invalid input
// reported as ErrInvalidJSON, a valid body always done and never truncated.
func openAIFuzzJSON(t *testing.T, api API, body []byte) {
	res, err := dialects[api].DecodeJSON(body)
	if err != nil {
		if !errors.Is(err, ErrInvalidJSON) || res != nil {
			t.Fatalf("DecodeJSON = %v, %v", res, err)
		}
		return
	}
	if !res.Done || res.Truncated || res.API != api {
		t.Fatalf("Done = %v, Truncated = %v, API = %q", res.Done, res.Truncated, res.API)
	}
	for _, tc := range res.ToolCalls {
		if len(tc.Arguments) > len(body) {
			t.Fatalf("arguments of %d bytes from a %d-byte body", len(tc.Arguments), len(body))
		}
	}
}

func FuzzChatJSON(f *testing.F) {
	for _, c := range chatJSONCases {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { openAIFuzzJSON(t, APIChat, body) })
}

func FuzzResponsesJSON(f *testing.F) {
	for _, c := range responsesJSONCases {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { openAIFuzzJSON(t, APIResponses, body) })
}
