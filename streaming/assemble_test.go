package streaming_test

import (
	"errors"
	"testing"

	"gatekeeper/streaming"
)

// TestAssembleJSON turns every whole reply stream into a body and reads it
// back: the body decodes to the reply the stream decodes to. A stream that
// did not stop cleanly is refused.
func TestAssembleJSON(t *testing.T) {
	for _, api := range escrowAPIs {
		streams := filterStreams(t, api)
		for _, name := range sortedNames(streams) {
			stream := streams[name]
			t.Run(string(api)+"/"+name, func(t *testing.T) {
				want, _ := mustDecode(t, api, stream)
				body, err := dialects[api].AssembleJSON(stream)
				if !wholeReply(want) {
					if err == nil && !apis[api].assemblesAnyEnd {
						t.Fatalf("a reply that did not stop cleanly was assembled: %s", body)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				got, err := dialects[api].DecodeJSON(body)
				if err != nil {
					t.Fatalf("%v: %s", err, body)
				}
				checkSameReply(t, got, completeCalls(want))
			})
		}
	}
}

func TestAssembleJSONErrors(t *testing.T) {
	tests := []struct {
		name   string
		api    streaming.API
		stream string
		want   error
	}{
		{"anthropic no stop", streaming.APIAnthropic, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"content\":[]}}\n\n", streaming.ErrIncompleteStream},
		{"anthropic error event", streaming.APIAnthropic, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"content\":[]}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", streaming.ErrIncompleteStream},
		{"anthropic not JSON", streaming.APIAnthropic, "event: message_start\ndata: {\"type\":\n\n", streaming.ErrInvalidJSON},
		{"anthropic cut input", streaming.APIAnthropic, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"content\":[]}}\n\n" +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"Bash\",\"input\":{}}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\"}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":3}}\n\n", streaming.ErrInvalidJSON},
		{"chat no finish", streaming.APIChat, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n", streaming.ErrIncompleteStream},
		{"chat error", streaming.APIChat, "data: {\"error\":{\"message\":\"boom\"}}\n\n", streaming.ErrIncompleteStream},
		{"responses no terminal", streaming.APIResponses, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\n", streaming.ErrIncompleteStream},
		{"empty", streaming.APIChat, "", streaming.ErrIncompleteStream},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := dialects[tt.api].AssembleJSON([]byte(tt.stream))
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %s, %v; want %v", body, err, tt.want)
			}
		})
	}
}
