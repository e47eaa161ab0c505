package gemini_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/gemini"
)

// cliRequest is a turn as Gemini CLI sends it: system instruction,
// function declarations, the model's call echoed with its
// thoughtSignature, and the tool's answer.
const cliRequest = `{"contents":[{"role":"user","parts":[{"text":"list the files"}]},
{"role":"model","parts":[{"functionCall":{"name":"run_shell_command","args":{"command":"ls"}},"thoughtSignature":"sig"}]},
{"role":"user","parts":[{"functionResponse":{"id":"run_shell_command__synth_1","name":"run_shell_command","response":{"output":"a.txt"}}},
{"functionResponse":{"name":"read_file","response":{"error":"no such file"}}}]}],
"systemInstruction":{"role":"user","parts":[{"text":"You are an interactive CLI agent."}]},
"tools":[{"functionDeclarations":[{"name":"run_shell_command","parametersJsonSchema":{"type":"object"}},{"name":"read_file"},{"name":"write_file"}]},{"googleSearch":{}}],
"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["read_file","run_shell_command"]}},
"generationConfig":{"temperature":0,"maxOutputTokens":8192,"thinkingConfig":{"includeThoughts":true}}}`

func TestParseRequest(t *testing.T) {
	d := gemini.Dialect{}
	req, err := d.ParseRequest([]byte(cliRequest))
	if err != nil {
		t.Fatal(err)
	}
	if req.API != streaming.APIGemini || req.MaxOutputTokens != 8192 || req.MaxOutputField != "generationConfig.maxOutputTokens" || req.Model != "" || req.Stream {
		t.Errorf("req = %+v", req)
	}
	if want := []string{"run_shell_command", "read_file", "write_file", "googleSearch"}; !slices.Equal(req.Tools, want) {
		t.Errorf("tools = %q, want %q", req.Tools, want)
	}
	if len(req.ToolResults) != 2 || req.ToolResults[0].ID != "run_shell_command__synth_1" || req.ToolResults[0].IsError ||
		req.ToolResults[1].ID != "" || !req.ToolResults[1].IsError || req.ToolResults[0].Digest == 0 {
		t.Errorf("results = %+v", req.ToolResults)
	}
	if !req.Replied || req.Fingerprint == "" {
		t.Errorf("replied %v fingerprint %q", req.Replied, req.Fingerprint)
	}
	// The fingerprint is the conversation's start: a later turn keeps it,
	// another first prompt changes it.
	first, _ := d.ParseRequest([]byte(`{"contents":[{"role":"user","parts":[{"text":"list the files"}]}],"systemInstruction":{"parts":[{"text":"You are an interactive CLI agent."}]},"tools":[{"functionDeclarations":[{"name":"run_shell_command"},{"name":"read_file"},{"name":"write_file"}]},{"googleSearch":{}}]}`))
	other, _ := d.ParseRequest([]byte(`{"contents":[{"role":"user","parts":[{"text":"delete the files"}]}],"systemInstruction":{"parts":[{"text":"You are an interactive CLI agent."}]},"tools":[{"functionDeclarations":[{"name":"run_shell_command"},{"name":"read_file"},{"name":"write_file"}]},{"googleSearch":{}}]}`))
	if first.Fingerprint != req.Fingerprint || other.Fingerprint == req.Fingerprint || first.Replied {
		t.Errorf("fingerprints %s %s %s", first.Fingerprint, req.Fingerprint, other.Fingerprint)
	}
	// snake_case, as the proto JSON accepts it.
	snake, err := d.ParseRequest([]byte(`{"contents":[],"generation_config":{"max_output_tokens":5},"tools":[{"function_declarations":[{"name":"x"}]}]}`))
	if err != nil || snake.MaxOutputTokens != 5 || snake.MaxOutputField != "generation_config.max_output_tokens" || !slices.Equal(snake.Tools, []string{"x"}) {
		t.Errorf("snake_case: %+v %v", snake, err)
	}
	// A limit set on the request's behalf goes into the config as it is
	// spelled, not into a second one.
	for body, field := range map[string]string{
		`{"contents":[],"generation_config":{"temperature":0}}`: "generation_config.max_output_tokens",
		`{"contents":[],"generationConfig":{"temperature":0}}`:  "",
		`{"contents":[]}`: "",
	} {
		r, err := d.ParseRequest([]byte(body))
		if err != nil || r.MaxOutputField != field || r.MaxOutputTokens != 0 {
			t.Errorf("%s: field %q, %v", body, r.MaxOutputField, err)
		}
	}
	if _, err := d.ParseRequest([]byte(`[1]`)); !errors.Is(err, streaming.ErrInvalidJSON) {
		t.Errorf("an array parsed: %v", err)
	}
}

func TestRestrictTools(t *testing.T) {
	d := gemini.Dialect{}
	out, removed, err := d.RestrictTools([]byte(cliRequest), func(n string) bool { return n == "read_file" })
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"run_shell_command", "write_file", "googleSearch"}; !slices.Equal(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	req, err := d.ParseRequest(out)
	if err != nil || !slices.Equal(req.Tools, []string{"read_file"}) {
		t.Fatalf("after restrict: %s: %+v %v", out, req, err)
	}
	if got := gjson.GetBytes(out, "toolConfig.functionCallingConfig.allowedFunctionNames").Raw; got != `["read_file"]` {
		t.Errorf("allowedFunctionNames = %s", got)
	}
	if !bytes.HasPrefix(out, []byte(cliRequest[:strings.Index(cliRequest, `"tools"`)])) {
		t.Error("the bytes before the tools changed")
	}
	// Nothing left: tools and toolConfig go.
	out, _, err = d.RestrictTools([]byte(cliRequest), func(string) bool { return false })
	if err != nil || gjson.GetBytes(out, "tools").Exists() || gjson.GetBytes(out, "toolConfig").Exists() || !gjson.ValidBytes(out) {
		t.Errorf("all removed: %s %v", out, err)
	}
	// Nothing to remove: the body as it came.
	if out, removed, _ := d.RestrictTools([]byte(cliRequest), func(string) bool { return true }); !bytes.Equal(out, []byte(cliRequest)) || removed != nil {
		t.Error("a body with every tool kept changed")
	}
}

func TestAppendNotice(t *testing.T) {
	out, err := gemini.Dialect{}.AppendNotice([]byte(cliRequest), "budget: 70% spent")
	if err != nil {
		t.Fatal(err)
	}
	last := gjson.GetBytes(out, "contents.@reverse.0")
	if last.Get("role").Str != "user" || last.Get("parts.0.text").Str != "budget: 70% spent" {
		t.Errorf("last content %s", last.Raw)
	}
	if _, err := (gemini.Dialect{}).AppendNotice([]byte(`{"x":1}`), "n"); !errors.Is(err, streaming.ErrNoConversation) {
		t.Errorf("no contents: %v", err)
	}
}

// TestContinuation: the refused calls are answered by functionResponse
// parts after the reply's own content, the thoughtSignature kept.
func TestContinuation(t *testing.T) {
	d := gemini.Dialect{}
	reply := read(t, "two-calls-finish.sse")
	res := streamtest.MustDecode(t, d, reply)
	out, err := d.Continuation([]byte(cliRequest), reply, true, map[string][]byte{"": []byte("denied by an approver")})
	if err != nil {
		t.Fatal(err)
	}
	cs := gjson.GetBytes(out, "contents").Array()
	model, answers := cs[len(cs)-2], cs[len(cs)-1]
	if model.Get("role").Str != "model" || len(model.Get("parts").Array()) != 4 {
		t.Errorf("model content %s", model.Raw)
	}
	rs := answers.Get("parts").Array()
	if len(rs) != 2 || rs[0].Get("functionResponse.name").Str != "read_file" || rs[0].Get("functionResponse.id").Exists() ||
		rs[1].Get("functionResponse.id").Str != "own-id-7" || rs[1].Get("functionResponse.response.error").Str != "denied by an approver" {
		t.Errorf("answers %s", answers.Raw)
	}
	if _, err := d.Continuation([]byte(cliRequest), reply, true, map[string][]byte{res.ToolCalls[0].ID: []byte("x")}); !errors.Is(err, streaming.ErrNoToolResult) {
		t.Errorf("a call without a result: %v", err)
	}
}

func TestAssembleAndRender(t *testing.T) {
	d := gemini.Dialect{}
	for _, name := range []string{"text.sse", "call.sse", "two-calls-finish.sse", "max-tokens.sse", "prompt-blocked.sse"} {
		t.Run(name, func(t *testing.T) {
			stream := read(t, name)
			body, err := d.AssembleJSON(stream)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.ContainsAny(body, "\n\r") || !gjson.ValidBytes(body) {
				t.Fatalf("body is not one line of JSON: %s", body)
			}
			want := streamtest.MustDecode(t, d, stream)
			got, err := d.DecodeJSON(body)
			if err != nil {
				t.Fatal(err)
			}
			if got.StopReason() != want.StopReason() || got.Usage != want.Usage || got.TextBytes != want.TextBytes ||
				len(got.ToolCalls) != len(want.ToolCalls) || got.MessageID != want.MessageID {
				t.Errorf("body reads\n%+v\nstream read\n%+v", got, want)
			}
			rendered, err := d.RenderSSE(body)
			if err != nil {
				t.Fatal(err)
			}
			sdkChunks(t, rendered)
		})
	}
	for _, name := range []string{"truncated.sse", "error-midstream.sse"} {
		if _, err := d.AssembleJSON(read(t, name)); !errors.Is(err, streaming.ErrIncompleteStream) && !errors.Is(err, streaming.ErrInvalidJSON) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got := gjson.GetBytes(mustAssemble(t, read(t, "text.sse")), "candidates.0.content.parts").Raw; got != `[{"text":"The capital is Paris."}]` {
		t.Errorf("text parts joined: %s", got)
	}
}

func mustAssemble(t *testing.T, stream []byte) []byte {
	t.Helper()
	b, err := gemini.Dialect{}.AssembleJSON(stream)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSplice: a held reply whose call was refused, joined with its
// continuation, reads as one reply: the prefix the agent had, the
// continuation's text, the usage of both.
func TestSplice(t *testing.T) {
	d := gemini.Dialect{}
	first := read(t, "two-calls-finish.sse")
	cont := read(t, "text.sse")
	spliced, err := d.SpliceStream(first, cont)
	if err != nil {
		t.Fatal(err)
	}
	sdkChunks(t, spliced)
	res := streamtest.MustDecode(t, d, spliced)
	if len(res.ToolCalls) != 0 || res.StopReason() != streaming.StopEndTurn || !strings.Contains(string(spliced), "Looking") && !strings.Contains(string(spliced), "Let me look.") {
		t.Fatalf("spliced %s\n%+v", spliced, res)
	}
	if !strings.Contains(string(spliced), " Done.") || !strings.Contains(string(spliced), "The capital") {
		t.Errorf("content lost: %s", spliced)
	}
	fres, cres := streamtest.MustDecode(t, d, first), streamtest.MustDecode(t, d, cont)
	if res.Usage.OutputTokens != fres.Usage.OutputTokens+cres.Usage.OutputTokens {
		t.Errorf("usage %+v, want the sum of %+v and %+v", res.Usage, fres.Usage, cres.Usage)
	}
	// The prefix is what a holding filter gave the agent before the stop.
	f, _ := d.NewCallFilter(func(string) bool { return true }, refusal)
	f.Hold()
	var prefix []byte
	n := 0
	_ = eachEvent(first, func(raw []byte, stop bool) {
		if !stop && n == 0 {
			prefix = filter(t, f, raw)
		}
		if stop {
			n++
		}
	})
	if !bytes.HasPrefix(spliced, prefix) {
		t.Errorf("spliced stream does not begin with the prefix %q", prefix)
	}

	body, err := d.SpliceJSON(mustAssemble(t, first), mustAssemble(t, cont))
	if err != nil {
		t.Fatal(err)
	}
	bres, err := d.DecodeJSON(body)
	if err != nil || len(bres.ToolCalls) != 0 || bres.StopReason() != streaming.StopEndTurn || bres.Usage != res.Usage {
		t.Errorf("spliced body %s: %+v %v", body, bres, err)
	}
}

func eachEvent(stream []byte, fn func(raw []byte, stop bool)) error {
	for _, ev := range bytes.SplitAfter(stream, []byte("\n\n")) {
		if len(ev) > 0 {
			fn(ev, bytes.Contains(ev, []byte("finishReason")))
		}
	}
	return nil
}

func TestErrorBodyAndKeepalive(t *testing.T) {
	d := gemini.Dialect{}
	tests := []struct {
		typ    string
		code   int64
		status string
	}{
		{"budget_exceeded", 402, "FAILED_PRECONDITION"},
		{"rate_limited", 429, "RESOURCE_EXHAUSTED"},
		{"authentication_error", 401, "UNAUTHENTICATED"},
		{"invalid_request_error", 400, "INVALID_ARGUMENT"},
		{"approval_refused", 403, "PERMISSION_DENIED"},
		{"api_error", 500, "INTERNAL"},
	}
	for _, tc := range tests {
		b := gjson.ParseBytes(d.ErrorBody(tc.typ, "why"))
		if b.Get("error.code").Int() != tc.code || b.Get("error.status").Str != tc.status || b.Get("error.message").Str != "why" {
			t.Errorf("%s: %s", tc.typ, b.Raw)
		}
	}
	// A keepalive is a chunk that changes nothing of the reply.
	stream := read(t, "text.sse")
	k := d.NewKeepalive()
	var with []byte
	i := 0
	_ = eachEvent(stream, func(raw []byte, _ bool) {
		with = append(with, raw...)
		if i == 0 {
			with = append(with, k.Event()...) // before anything went out
		}
		i++
	})
	with = append(with, k.Event()...)
	sdkChunks(t, with)
	if got, want := streamtest.MustDecode(t, d, with), streamtest.MustDecode(t, d, stream); got.Usage != want.Usage || got.TextBytes != want.TextBytes || got.StopReason() != want.StopReason() {
		t.Errorf("keepalives changed the reply: %+v", got)
	}
}

func FuzzGeminiRequest(f *testing.F) {
	f.Add([]byte(cliRequest), "read_file")
	f.Add([]byte(`{"contents":[],"tools":[{"functionDeclarations":[]},{}]}`), "")
	f.Fuzz(func(t *testing.T, body []byte, keep string) {
		d := gemini.Dialect{}
		req, err := d.ParseRequest(body)
		if err != nil {
			if !errors.Is(err, streaming.ErrInvalidJSON) {
				t.Fatal(err)
			}
			return
		}
		out, removed, err := d.RestrictTools(body, func(n string) bool { return n == keep })
		if err != nil {
			t.Fatal(err)
		}
		if !gjson.ValidBytes(out) {
			t.Fatalf("restricted body is not JSON: %s", out)
		}
		after, err := d.ParseRequest(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range after.Tools {
			if n != keep {
				t.Fatalf("tool %q kept (removed %q, before %q)", n, removed, req.Tools)
			}
		}
		if _, err := d.AppendNotice(body, "n"); err != nil && !errors.Is(err, streaming.ErrNoConversation) {
			t.Fatal(err)
		}
	})
}

func TestTurnPath(t *testing.T) {
	tests := []struct {
		rest, model string
		stream, ok  bool
	}{
		{"/v1beta/models/gemini-2.5-pro:streamGenerateContent", "gemini-2.5-pro", true, true},
		{"/v1beta/models/gemini-2.5-flash:generateContent", "gemini-2.5-flash", false, true},
		{"/v1/models/gemini-2.5-flash-lite:generateContent", "gemini-2.5-flash-lite", false, true},
		{"/v1beta/models/gemini-2.5-pro:countTokens", "", false, false},
		{"/v1beta/models/a%2Fb:generateContent", "", false, false},
		{"/v1beta/models/:generateContent", "", false, false},
		{"/v1beta/tunedModels/x:generateContent", "", false, false},
		{"/v1beta/models/x/y:generateContent", "", false, false},
	}
	for _, tc := range tests {
		model, stream, ok := gemini.TurnPath(tc.rest)
		if model != tc.model || stream != tc.stream || ok != tc.ok {
			t.Errorf("TurnPath(%q) = %q, %v, %v", tc.rest, model, stream, ok)
		}
		if ok {
			rest, query := gemini.TurnRest(model, stream)
			if m, s, ok := gemini.TurnPath(rest); m != model || s != stream || !ok || (query == "alt=sse") != stream {
				t.Errorf("TurnRest(%q, %v) = %q, %q", model, stream, rest, query)
			}
		}
	}
}

// TestReplyMarkBySignature: a Gemini reply's calls often carry no id, and
// Gemini CLI replays them with ids of its own making; the thought
// signature of the first call part is what the reply and its replay
// share, so a later turn of a session that names none finds the run of
// its first.
func TestReplyMarkBySignature(t *testing.T) {
	reply := func(sig string) string {
		return `{"candidates":[{"content":{"role":"model","parts":[{"text":"Listing."},` +
			`{"functionCall":{"name":"run_shell_command","args":{"command":"ls"}},"thoughtSignature":"` + sig + `"},` +
			`{"functionCall":{"name":"read_file","args":{}}}]},"finishReason":"STOP","index":0}],"responseId":"r-1"}`
	}
	replay := func(sig, id string) string {
		return `{"contents":[{"role":"user","parts":[{"text":"list the files"}]},
{"role":"model","parts":[{"text":"Listing."},{"functionCall":{"id":"` + id + `","name":"run_shell_command","args":{"command":"ls"}},"thoughtSignature":"` + sig + `"},
{"functionCall":{"id":"` + id + `-2","name":"read_file","args":{}}}]},
{"role":"user","parts":[{"functionResponse":{"id":"` + id + `","name":"run_shell_command","response":{"output":"a.txt"}}}]}]}`
	}
	d := gemini.Dialect{}
	mark := func(body string) string {
		t.Helper()
		res, err := d.DecodeJSON([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return streaming.ReplyMark(res)
	}
	first := func(body string) string {
		t.Helper()
		req, err := d.ParseRequest([]byte(body))
		if err != nil || !req.Replied {
			t.Fatalf("%v %+v", err, req)
		}
		return req.FirstReply
	}
	a, b := mark(reply("c2lnLWE=")), mark(reply("c2lnLWI="))
	if a == "" || a == b {
		t.Fatalf("marks of two replies with two signatures: %q and %q", a, b)
	}
	if got := first(replay("c2lnLWE=", "run_shell_command_1765100000000_0")); got != a {
		t.Errorf("the replay's mark %q, the reply's %q", got, a)
	}
	// Streamed: the same reply in chunks has the same mark.
	stream := "data: " + `{"candidates":[{"content":{"role":"model","parts":[{"text":"Listing."}]},"index":0}],"responseId":"r-1"}` + "\r\n\r\n" +
		"data: " + `{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"run_shell_command","args":{"command":"ls"}},"thoughtSignature":"c2lnLWE="}]},"finishReason":"STOP","index":0}],"responseId":"r-1"}` + "\r\n\r\n"
	if got := streaming.ReplyMark(streamtest.MustDecode(t, d, []byte(stream))); got != a {
		t.Errorf("streamed reply's mark %q, the body's %q", got, a)
	}
	// Without a signature on the first call part, the call id names the
	// reply on both sides, as before.
	noSig := `{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"id":"c-9","name":"run_shell_command","args":{}}}]},"finishReason":"STOP","index":0}]}`
	if got, want := mark(noSig), streaming.CallMark("c-9"); got != want {
		t.Errorf("mark without a signature %q, want %q", got, want)
	}
}
