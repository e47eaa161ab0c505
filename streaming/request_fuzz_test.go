package streaming_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
)

var fuzzAPIs = [...]streaming.API{streaming.APIAnthropic, streaming.APIChat, streaming.APIResponses}

// FuzzParseRequest feeds ParseRequest arbitrary bodies under an API picked
// by the first argument. It must never panic, must accept exactly the JSON
// objects encoding/json accepts, must not modify or keep the body, and
// must return well-formed values.
func FuzzParseRequest(f *testing.F) {
	for _, name := range fixturetest.Glob(f, filepath.Join(requestTestdata, "*.json")) {
		body := fixturetest.ReadFile(f, name)
		base := filepath.Base(name)
		switch {
		case strings.HasPrefix(base, "anthropic-"):
			f.Add(uint8(0), body)
		case strings.HasPrefix(base, "chat-"):
			f.Add(uint8(1), body)
		default:
			f.Add(uint8(2), body)
		}
	}
	for _, s := range []string{
		`{}`,
		`{"messages":[{"role":"assistant","content":[]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","is_error":true}]}]}`,
		`{"messages":[{"role":"assistant","tool_calls":[]},{"role":"tool","tool_call_id":"c1"}],"max_completion_tokens":5}`,
		`{"input":[{"type":"function_call","call_id":"c"},{"type":"function_call_output","call_id":"c","output":"x"}]}`,
		`{"input":[{"type":"local_shell_call","call_id":"c"},{"type":"local_shell_call_output","id":"c","output":"x"},` +
			`{"type":"shell_call_output","call_id":"d","output":[]},{"type":"apply_patch_call_output","call_id":"e","status":"failed"},` +
			`{"type":"computer_call_output","call_id":"f","output":{}},{"type":"foo\u005fcall_output","call_id":"g"}]}`,
		`{"input":"hi","instructions":"be \u00e9 \ud83d\ude00 \ud800","prompt_cache_key":"k"}`,
		`{"metadata":{"user_id":"{\"session_id\":\"s\",\"x\":[[[]]]}"}}`,
		`{"metadata":{"user_id":"user_a_account__session_\u0073"},"messages":[{"role":"assistant","content":"hi \ud83d"}]}`,
		`{"previous_response_id":"resp_1","conversation":{"id":"conv_1"},"input":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"x"}]}]}`,
		`{"prompt_cache_key":"ses_1","messages":[{"role":"assistant","tool_calls":[{"id":"call_\u00e9"}],"content":[{"type":"text","text":"a"}]}]}`,
		`{"system":[{"type":"text","text":"x-anthropic-billing-header: a"},{"type":"text","text":"b"}]}`,
		`{"tools":[{"type":"namespace","tools":[{"name":"f"}]},{"type":"web_search"}],"input":[{"type":"additional_tools","tools":[{"type":"custom","name":"exec"}]}]}`,
		`{"a":tru[[[}`, `{"a":1[]}`, `{"a" : [ 1 , { "b" : null } ] , }`, `{"\u006dodel":"m"}`, `{"model":"a\`,
		`[`, `"x"`, ``, ` { } `, `{"a":[[[[[[[[[[]]]]]]]]]]}`,
	} {
		for i := range fuzzAPIs {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		api := fuzzAPIs[int(sel)%len(fuzzAPIs)]
		work := bytes.Clone(body)
		req, err := dialects[api].ParseRequest(work)
		if !bytes.Equal(work, body) {
			t.Fatal("ParseRequest modified the body")
		}
		i := jsonscan.SkipSpace(string(body), 0)
		wantOK := json.Valid(body) && i < len(body) && body[i] == '{'
		if err != nil {
			if !errors.Is(err, streaming.ErrInvalidJSON) || req != nil {
				t.Fatalf("ParseRequest = %v, %v", req, err)
			}
			if wantOK {
				t.Fatalf("valid JSON object rejected: %v", err)
			}
			return
		}
		if !wantOK {
			t.Fatal("invalid JSON or non-object accepted")
		}
		checkRequest(t, api, req)

		// Overwriting the body must not change what was returned.
		for i := range work {
			work[i] = '"'
		}
		again, err := dialects[api].ParseRequest(body)
		if err != nil || !reflect.DeepEqual(req, again) {
			t.Fatalf("request changed with its body or between parses:\n%+v\n%+v (%v)", req, again, err)
		}

		// The raw walkers also run on what was never validated.
		s := string(body)
		jsonscan.ReadObject(s, "a", "b", "c", "d")
		jsonscan.MemberRaw(s, "model")
		for it, n := jsonscan.NewArrayIter(s), 0; n <= len(s); n++ {
			if _, ok := it.Next(); !ok {
				break
			}
		}
		jsonscan.Unquote(s)
		jsonscan.HasPrefixDecoded(s, "x-anthropic-billing-header")
	})
}

func checkRequest(t *testing.T, api streaming.API, req *streaming.Request) {
	t.Helper()
	if req.API != api {
		t.Errorf("API = %q, want %q", req.API, api)
	}
	if b, err := hex.DecodeString(req.Fingerprint); err != nil || len(b) != 16 {
		t.Errorf("Fingerprint = %q", req.Fingerprint)
	}
	switch req.MaxOutputField {
	case "":
		if req.MaxOutputTokens != 0 {
			t.Errorf("MaxOutputTokens = %d without a field", req.MaxOutputTokens)
		}
	case "max_tokens", "max_completion_tokens", "max_output_tokens":
	default:
		t.Errorf("MaxOutputField = %q", req.MaxOutputField)
	}
	if len(req.SessionHint) > streaming.MaxSessionHint {
		t.Errorf("SessionHint of %d bytes, over MaxSessionHint", len(req.SessionHint))
	}
	if req.FirstReply != "" && !req.Replied {
		t.Errorf("FirstReply %q of a first turn", req.FirstReply)
	}
	if m := req.FirstReply; m != "" && len(m) > 5+256 {
		t.Errorf("FirstReply of %d bytes: a mark is bounded", len(m))
	}
	if req.IncludeUsage && !apis[api].streamOptions {
		t.Errorf("IncludeUsage on %s", api)
	}
	for _, name := range req.Tools {
		if name == "" {
			t.Errorf("empty tool name in %q", req.Tools)
		}
	}
	for _, r := range req.ToolResults {
		switch {
		case r.Type == "tool_result":
		case r.Type == "tool", apis[api].callOutputs && strings.HasSuffix(r.Type, "_call_output"):
			if r.IsError {
				t.Errorf("IsError on %+v", r)
			}
		default:
			t.Errorf("ToolResult.Type = %q", r.Type)
		}
	}
}
