package anthropic_test

import (
	"errors"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/anthropic"
)

func FuzzAnthropic(f *testing.F) {
	streamtest.AddStreamSeeds(f, testdata)
	f.Add([]byte("event: error\r\ndata: {\"type\":\"error\",\"error\":{\"type\":\"x\",\"message\":\"\\ud800\"}}\r\r"), uint64(2))
	f.Add([]byte("\xEF\xBB\xBFdata: {\"type\":\"content_block_start\",\"index\":9e9,\"content_block\":{\"type\":\"x_tool_use\",\"id\":\"i\",\"name\":\"n\",\"input\":{\"a\":[1]}}}\n\n"), uint64(3))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		if res, ok := streamtest.DecodeSplit(t, anthropic.Dialect{}, data, seed); ok {
			checkAnthropicInvariants(t, data, res)
		}
	})
}

func checkAnthropicInvariants(t *testing.T, data []byte, res *streaming.Result) {
	t.Helper()
	if res.API != streaming.APIAnthropic {
		t.Fatalf("api %q", res.API)
	}
	if res.Truncated && (res.Done || len(res.Errors) > 0) {
		t.Fatalf("truncated with done %v and %d errors", res.Done, len(res.Errors))
	}
	if len(res.Stops) > 1 {
		t.Fatalf("%d stops for a single-choice API", len(res.Stops))
	}
	if len(res.UnparsedErrors) > streaming.MaxUnparsedErrors || len(res.UnparsedErrors) > res.Unparsed {
		t.Fatalf("%d unparsed errors kept for %d", len(res.UnparsedErrors), res.Unparsed)
	}
	// Decoding never grows text, so what is kept is bounded by the input.
	if res.OutputBytes > int64(len(data)) {
		t.Fatalf("output bytes %d from %d input bytes", res.OutputBytes, len(data))
	}
	kept := 0
	for _, tc := range res.ToolCalls {
		if tc.Complete && len(tc.Arguments) == 0 {
			t.Fatalf("complete call %q without arguments", tc.ID)
		}
		kept += len(tc.Arguments)
	}
	if kept > len(data)+2*len(res.ToolCalls) {
		t.Fatalf("%d argument bytes kept from %d input bytes", kept, len(data))
	}
}

func FuzzAnthropicJSON(f *testing.F) {
	f.Add([]byte(`{"id":"msg_1","type":"message","model":"m","content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t","name":"n","input":{"a":1}}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":2}}`))
	f.Add([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	f.Add([]byte(`{"content":[{"type":"mcp_tool_use","id":"x","name":"y"}],"stop_reason":null}`))
	f.Add([]byte(`[1,2]`))
	f.Add([]byte(`{"type":"message","content":`))
	f.Fuzz(func(t *testing.T, body []byte) {
		res, err := anthropic.Dialect{}.DecodeJSON(body)
		if err != nil {
			if !errors.Is(err, streaming.ErrInvalidJSON) || res != nil {
				t.Fatalf("error %v with result %+v", err, res)
			}
			return
		}
		if !gjson.ValidBytes(body) {
			t.Fatal("accepted a body that is not JSON")
		}
		if res.API != streaming.APIAnthropic || res.Truncated || res.Done == (len(res.Errors) > 0) {
			t.Fatalf("api %q truncated %v done %v errors %d", res.API, res.Truncated, res.Done, len(res.Errors))
		}
		for _, tc := range res.ToolCalls {
			if !tc.Complete || !gjson.ValidBytes(tc.Arguments) {
				t.Fatalf("call %+v", tc)
			}
		}
	})
}
