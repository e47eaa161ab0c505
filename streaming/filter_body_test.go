package streaming_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
)

// TestCallFilterBody filters whole replies.
func TestCallFilterBody(t *testing.T) {
	refusedOnly := map[streaming.API]string{
		streaming.APIAnthropic: `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"rm -rf /srv/withheld-target"}}],"stop_reason":"tool_use","usage":{"input_tokens":5,"output_tokens":9}}`,
		streaming.APIChat:      `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Clearing the directory.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"Bash","arguments":"{\"command\":\"rm -rf /srv/withheld-target\"}"}}]},"finish_reason":"tool_calls"}]}`,
		streaming.APIResponses: `{"id":"resp_1","object":"response","status":"completed","output":[{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"command\":\"rm -rf /srv/withheld-target\"}","call_id":"call_1","name":"Bash"}]}`,
	}
	tests := []struct {
		name     string
		api      streaming.API
		body     []byte
		allowed  string
		wantStop streaming.StopReason
		wantText string // the message text after filtering
	}{
		{"anthropic text, refused, allowed", streaming.APIAnthropic, fixturetest.ReadFile(t, filterTestdata, "anthropic-body.json"), "Read", streaming.StopToolUse, ""},
		{"anthropic refused only", streaming.APIAnthropic, []byte(refusedOnly[streaming.APIAnthropic]), "", streaming.StopEndTurn, ""},
		{"chat null content, refused, allowed", streaming.APIChat, fixturetest.ReadFile(t, filterTestdata, "chat-body.json"), "Read", streaming.StopToolUse, "gatekeeper withheld a call to Bash: this run may only use read-only tools now."},
		{"chat content, refused only", streaming.APIChat, []byte(refusedOnly[streaming.APIChat]), "", streaming.StopEndTurn, "Clearing the directory.\n\ngatekeeper withheld a call to Bash: this run may only use read-only tools now."},
		{"responses text, refused, allowed", streaming.APIResponses, fixturetest.ReadFile(t, filterTestdata, "responses-body.json"), "Read", streaming.StopToolUse, ""},
		{"responses refused only", streaming.APIResponses, []byte(refusedOnly[streaming.APIResponses]), "", streaming.StopEndTurn, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inRes, err := dialects[tt.api].DecodeJSON(tt.body)
			if err != nil {
				t.Fatal(err)
			}
			refusedIn, _ := callByName(inRes.ToolCalls, "Bash")
			f := newTestFilter(t, tt.api, refuseNames("Bash"))
			out, err := f.Body(tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(out) {
				t.Fatalf("not JSON: %s", out)
			}
			for _, secret := range []string{strconv.Quote(refusedIn.ID), `"Bash"`, withheldArgument} {
				if bytes.Contains(out, []byte(secret)) {
					t.Errorf("the output holds %s: %s", secret, out)
				}
			}
			res, err := dialects[tt.api].DecodeJSON(out)
			if err != nil {
				t.Fatal(err)
			}
			if res.StopReason() != tt.wantStop || res.Unparsed != 0 {
				t.Errorf("stop %q unparsed %d, want %q", res.StopReason(), res.Unparsed, tt.wantStop)
			}
			clients := res.ClientToolCalls()
			if tt.allowed == "" && len(clients) != 0 || tt.allowed != "" && (len(clients) != 1 || clients[0].Name != tt.allowed) {
				t.Errorf("delivered %+v, want %q", clients, tt.allowed)
			}
			if tt.allowed != "" {
				want, _ := callByName(inRes.ToolCalls, tt.allowed)
				if got := clients[0]; got.ID != want.ID || !jsonEqual(t, got.Arguments, want.Arguments) {
					t.Errorf("delivered %+v, want %+v", got, want)
				}
			}
			apis[tt.api].refusedInBody(t, out, refusedIn, filterRefusal(refusedIn), tt.wantText)
			if r := f.Refused(); len(r) != 1 || r[0].ID != refusedIn.ID || r[0].Name != "Bash" {
				t.Errorf("Refused() = %+v", r)
			}

			same, err := newTestFilter(t, tt.api, allowAll).Body(tt.body)
			if err != nil || !bytes.Equal(same, tt.body) {
				t.Errorf("allow all changed the body: %v\n%s", err, same)
			}
		})
	}
}

func TestCallFilterBodyErrors(t *testing.T) {
	tests := []struct {
		name string
		api  streaming.API
		body string
		want error
	}{
		{"not JSON", streaming.APIChat, `{"choices":[`, streaming.ErrInvalidJSON},
		{"an array", streaming.APIResponses, `[{"type":"function_call"}]`, streaming.ErrInvalidJSON},
		{"empty", streaming.APIAnthropic, ``, streaming.ErrInvalidJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := newTestFilter(t, tt.api, refuseAll).Body([]byte(tt.body)); !errors.Is(err, tt.want) {
				t.Fatalf("Body = %v, want %v", err, tt.want)
			}
		})
	}
	// An error body passes as it came.
	for api, body := range map[streaming.API]string{
		streaming.APIAnthropic: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
		streaming.APIResponses: `{"error":{"message":"bad","type":"invalid_request_error","code":null}}`,
	} {
		if out, err := newTestFilter(t, api, refuseAll).Body([]byte(body)); err != nil || string(out) != body {
			t.Errorf("%s error body: %v %s", api, err, out)
		}
	}
}
