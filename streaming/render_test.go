package streaming_test

import (
	"errors"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
)

// TestRenderSSE renders the body of every whole reply stream and reads it
// back: the rendered stream decodes to the reply the body decodes to, with
// the text of the original stream, and assembles into the same body.
func TestRenderSSE(t *testing.T) {
	for _, api := range escrowAPIs {
		streams := filterStreams(t, api)
		for _, name := range sortedNames(streams) {
			stream := streams[name]
			res, _ := mustDecode(t, api, stream)
			if !wholeReply(res) {
				continue
			}
			t.Run(string(api)+"/"+name, func(t *testing.T) {
				body, err := dialects[api].AssembleJSON(stream)
				if err != nil {
					t.Fatal(err)
				}
				rendered, err := dialects[api].RenderSSE(body)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := mustDecode(t, api, rendered)
				if !wholeReply(got) {
					t.Fatalf("the rendered stream is not a whole reply: %+v\n%s", got, rendered)
				}
				want, err := dialects[api].DecodeJSON(body)
				if err != nil {
					t.Fatal(err)
				}
				checkSameReply(t, completeCalls(got), want)
				if !apis[api].textFromItems {
					orig, text := replyText(t, api, stream), replyText(t, api, rendered)
					for k, v := range orig {
						if text[k] != v {
							t.Errorf("%s: %q, want %q", k, text[k], v)
						}
					}
				}
				again, err := dialects[api].AssembleJSON(rendered)
				if err != nil {
					t.Fatal(err)
				}
				if !jsonEqual(t, again, body) {
					t.Errorf("the rendered stream assembles into\n%s\nwant\n%s", again, body)
				}
			})
		}
	}
}

// TestRenderSSEBodies renders bodies written as the providers send them.
func TestRenderSSEBodies(t *testing.T) {
	bodies := map[streaming.API]string{streaming.APIAnthropic: "anthropic-body.json", streaming.APIChat: "chat-body.json", streaming.APIResponses: "responses-body.json"}
	for _, api := range escrowAPIs {
		body := fixturetest.ReadFile(t, filterTestdata, bodies[api])
		rendered, err := dialects[api].RenderSSE(body)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := mustDecode(t, api, rendered)
		want, _ := dialects[api].DecodeJSON(body)
		if !wholeReply(got) {
			t.Fatalf("%s: not a whole reply:\n%s", api, rendered)
		}
		checkSameReply(t, got, want)
		again, err := dialects[api].AssembleJSON(rendered)
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"content", "stop_reason", "usage", "choices.0.message.tool_calls", "choices.0.message.content", "output"} {
			if a, b := gjson.GetBytes(again, path), gjson.GetBytes(body, path); a.Exists() != b.Exists() || a.Exists() && !jsonEqual(t, []byte(a.Raw), []byte(b.Raw)) {
				t.Errorf("%s %s: %s, want %s", api, path, a.Raw, b.Raw)
			}
		}
	}
}

func TestRenderSSEErrors(t *testing.T) {
	tests := []struct {
		name string
		api  streaming.API
		body string
		want error
	}{
		{"not JSON", streaming.APIAnthropic, `{"type":"message"`, streaming.ErrInvalidJSON},
		{"anthropic error body", streaming.APIAnthropic, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, streaming.ErrInvalidJSON},
		{"chat error body", streaming.APIChat, `{"error":{"message":"boom"}}`, streaming.ErrInvalidJSON},
		{"responses without output", streaming.APIResponses, `{"id":"resp_1"}`, streaming.ErrInvalidJSON},
		{"array", streaming.APIChat, `[]`, streaming.ErrInvalidJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if out, err := dialects[tt.api].RenderSSE([]byte(tt.body)); !errors.Is(err, tt.want) {
				t.Fatalf("got %s, %v; want %v", out, err, tt.want)
			}
		})
	}
}
