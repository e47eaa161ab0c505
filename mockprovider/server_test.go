package mockprovider

import (
	"compress/gzip"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
)

func do(t *testing.T, method, url, body string, headers map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(testContext(t), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := io.Reader(resp.Body)
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

var (
	anthropicAuth = map[string]string{"x-api-key": "sk-ant", "anthropic-version": "2023-06-01"}
	openAIAuth    = map[string]string{"Authorization": "Bearer sk-oai"}
	anthropicReq  = regexp.MustCompile(`^req_011C[0-9A-Za-z]{20}$`)
	openAIReq     = regexp.MustCompile(`^req_[0-9a-f]{32}$`)
)

func with(h map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func TestRoutes(t *testing.T) {
	const msgs = `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name      string
		method    string
		path      string
		headers   map[string]string
		body      string
		status    int
		anthropic bool              // error and header dialect expected
		want      map[string]string // gjson path → value in the body
	}{
		{"head", http.MethodHead, "/", nil, "", 200, false, nil},
		{"models anthropic", http.MethodGet, "/v1/models", anthropicAuth, "", 200, true,
			map[string]string{"data.0.type": "model", "has_more": "false", "data.0.id": "claude-sonnet-4-5-20250929"}},
		{"models openai", http.MethodGet, "/v1/models", openAIAuth, "", 200, false,
			map[string]string{"object": "list", "data.0.object": "model", "data.0.id": "gpt-5"}},
		{"models without a key", http.MethodGet, "/v1/models", map[string]string{"anthropic-version": "2023-06-01"}, "", 401, true,
			map[string]string{"type": "error", "error.type": "authentication_error"}},
		{"count tokens", http.MethodPost, "/v1/messages/count_tokens?beta=true", anthropicAuth, msgs, 200, true,
			map[string]string{"input_tokens": strconv.FormatInt(tokens(len(msgs)), 10)}},
		{"count tokens without messages", http.MethodPost, "/v1/messages/count_tokens", anthropicAuth, `{"model":"m"}`, 400, true,
			map[string]string{"error.type": "invalid_request_error", "error.message": "messages: Field required"}},
		{"messages without a key", http.MethodPost, "/v1/messages", map[string]string{"anthropic-version": "2023-06-01"}, msgs, 401, true,
			map[string]string{"type": "error", "error.type": "authentication_error", "error.message": "x-api-key header is required"}},
		{"messages with a bearer token", http.MethodPost, "/v1/messages", openAIAuth, msgs, 200, true,
			map[string]string{"type": "message", "stop_reason": "end_turn", "content.0.text": "You said: hi"}},
		{"chat with x-api-key only", http.MethodPost, "/v1/chat/completions", map[string]string{"x-api-key": "k"}, `{}`, 401, false,
			map[string]string{"error.type": "authentication_error"}},
		{"messages with broken JSON", http.MethodPost, "/v1/messages", anthropicAuth, `{"model":`, 400, true,
			map[string]string{"error.type": "invalid_request_error"}},
		{"chat with broken JSON", http.MethodPost, "/v1/chat/completions", openAIAuth, `[1,2]`, 400, false,
			map[string]string{"error.type": "invalid_request_error", "error.message": "We could not parse the JSON body of your request."}},
		{"messages without max_tokens", http.MethodPost, "/v1/messages", anthropicAuth, `{"model":"m","messages":[]}`, 400, true,
			map[string]string{"error.message": "max_tokens: Field required"}},
		{"messages without model", http.MethodPost, "/v1/messages", anthropicAuth, `{"max_tokens":1,"messages":[]}`, 400, true,
			map[string]string{"error.message": "model: Field required"}},
		{"messages without messages", http.MethodPost, "/v1/messages", anthropicAuth, `{"model":"m","max_tokens":1}`, 400, true,
			map[string]string{"error.message": "messages: Field required"}},
		{"chat without model", http.MethodPost, "/v1/chat/completions", openAIAuth, `{"messages":[]}`, 400, false,
			map[string]string{"error.message": "you must provide a model parameter"}},
		{"chat without messages", http.MethodPost, "/v1/chat/completions", openAIAuth, `{"model":"m"}`, 400, false,
			map[string]string{"error.param": "messages"}},
		{"responses without model", http.MethodPost, "/v1/responses", openAIAuth, `{"input":"hi"}`, 400, false,
			map[string]string{"error.message": "Missing required parameter: 'model'."}},
		{"unknown openai path", http.MethodGet, "/v1/files", openAIAuth, "", 404, false,
			map[string]string{"error.message": "Invalid URL (GET /v1/files)"}},
		{"unknown anthropic path", http.MethodPost, "/v1/messages/batches", anthropicAuth, "{}", 404, true,
			map[string]string{"type": "error", "error.type": "not_found_error"}},
		{"wrong method", http.MethodGet, "/v1/messages", anthropicAuth, "", 404, true,
			map[string]string{"error.type": "not_found_error"}},
		{"turn header that is not JSON", http.MethodPost, "/v1/messages", with(anthropicAuth, HeaderTurn, `{"kind":`), msgs, 400, true,
			map[string]string{"error.type": "invalid_request_error"}},
		{"turn header with an unknown kind", http.MethodPost, "/v1/chat/completions", with(openAIAuth, HeaderTurn, `{"kind":"txt"}`),
			`{"model":"m","messages":[]}`, 400, false,
			map[string]string{"error.message": `mock script: X-Mock-Turn.kind: unknown kind "txt" (want one of text, tool, max_tokens, refusal, error_midstream, http_error, disconnect)`}},
		{"turn header naming no turn", http.MethodPost, "/v1/messages", with(anthropicAuth, HeaderTurn, `nope`), msgs, 400, true,
			map[string]string{"error.message": `mock script: X-Mock-Turn: no turn named "nope"`}},
		{"scripted 500", http.MethodPost, "/v1/messages", with(anthropicAuth, HeaderTurn, `{"kind":"http_error","status":500,"error_message":"boom"}`), msgs, 500, true,
			map[string]string{"error.type": "api_error", "error.message": "boom"}},
		{"scripted 400 keeps the wording", http.MethodPost, "/v1/messages",
			with(anthropicAuth, HeaderTurn, `{"kind":"http_error","status":400,"error_message":"prompt is too long: 210000 tokens > 200000 maximum"}`), msgs, 400, true,
			map[string]string{"error.type": "invalid_request_error", "error.message": "prompt is too long: 210000 tokens > 200000 maximum"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, url := newMock(t, Options{})
			resp, body := do(t, tt.method, url+tt.path, tt.body, tt.headers)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			for path, want := range tt.want {
				if got := gjson.GetBytes(body, path).String(); got != want {
					t.Errorf("%s = %q, want %q in %s", path, got, want, body)
				}
			}
			if tt.anthropic {
				if !anthropicReq.MatchString(resp.Header.Get("request-id")) || resp.Header.Get("anthropic-ratelimit-requests-remaining") != "3999" {
					t.Errorf("headers %v", resp.Header)
				}
				if tt.status >= 400 && gjson.GetBytes(body, "request_id").String() != resp.Header.Get("request-id") {
					t.Errorf("error body request_id does not match the header: %s", body)
				}
			} else if !openAIReq.MatchString(resp.Header.Get("x-request-id")) || resp.Header.Get("x-ratelimit-remaining-requests") != "3999" {
				t.Errorf("headers %v", resp.Header)
			}
			if got := onlyRequest(t, s).Status; got != tt.status {
				t.Errorf("recorded status %d", got)
			}
		})
	}
}

func TestGzip(t *testing.T) {
	const body = `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name, accept string
		gzipped      bool
	}{
		{"gzip", "gzip, deflate, br, zstd", true},
		{"star", "*", true},
		{"identity only", "identity", false},
		{"gzip refused", "gzip;q=0, identity", false},
		{"none", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, url := newMock(t, Options{})
			h := with(openAIAuth)
			if tt.accept != "" {
				h["Accept-Encoding"] = tt.accept
			}
			resp, b := do(t, http.MethodPost, url+"/v1/chat/completions", body, h)
			if got := resp.Header.Get("Content-Encoding") == "gzip"; got != tt.gzipped {
				t.Errorf("gzipped = %v, want %v", got, tt.gzipped)
			}
			if gjson.GetBytes(b, "object").String() != "chat.completion" {
				t.Errorf("body %s", b)
			}
		})
	}
}

func TestKeys(t *testing.T) {
	s, url := newMock(t, Options{Keys: []string{"sk-real"}})
	const msgs = `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	resp, body := do(t, http.MethodPost, url+"/v1/messages", msgs, map[string]string{"x-api-key": "gk-virtual"})
	if resp.StatusCode != 401 || gjson.GetBytes(body, "error.message").String() != "invalid x-api-key" {
		t.Errorf("virtual key: %d %s", resp.StatusCode, body)
	}
	resp, _ = do(t, http.MethodPost, url+"/v1/messages", msgs, map[string]string{"x-api-key": "sk-real"})
	if resp.StatusCode != 200 {
		t.Errorf("real key: %d", resp.StatusCode)
	}
	reqs := s.Requests()
	if len(reqs) != 2 || reqs[0].APIKey != "gk-virtual" || reqs[1].APIKey != "sk-real" {
		t.Errorf("recorded keys: %+v", reqs)
	}
}

func TestRecordedRequests(t *testing.T) {
	s, url := newMock(t, Options{})
	const body = `{"model":"claude-sonnet-4-5","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"mock:parallel"}],` +
		`"tools":[{"name":"Read","input_schema":{"type":"object","properties":{"file_path":{"type":"string"}},"required":["file_path"]}}]}`
	resp := post(t, testContext(t), url+"/v1/messages?beta=true", body, "X-Claude-Code-Session-Id", "abc")
	events, err := readAllEvents(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	rec := onlyRequest(t, s)
	if rec.Method != http.MethodPost || rec.Path != "/v1/messages" || rec.RawQuery != "beta=true" || string(rec.Body) != body {
		t.Errorf("request line or body: %s %s ? %s, %s", rec.Method, rec.Path, rec.RawQuery, rec.Body)
	}
	if rec.Header.Get("X-Claude-Code-Session-Id") != "abc" || rec.APIKey != "sk-test" || rec.Model != "claude-sonnet-4-5" {
		t.Errorf("header %v key %q model %q", rec.Header, rec.APIKey, rec.Model)
	}
	if rec.Turn != "parallel" || !rec.Stream || rec.API != APIAnthropic || rec.Status != 200 {
		t.Errorf("turn %q stream %v api %q status %d", rec.Turn, rec.Stream, rec.API, rec.Status)
	}
	if len(rec.EventTimes) != len(events) || rec.Started.IsZero() || !rec.Ended.After(rec.Started) {
		t.Errorf("%d event times for %d events; started %v ended %v", len(rec.EventTimes), len(events), rec.Started, rec.Ended)
	}
	// Records are copies: changing one does not change the server's.
	rec.Header.Set("X-Claude-Code-Session-Id", "changed")
	rec.Body[0] = 'X'
	if again := s.Requests()[0]; again.Header.Get("X-Claude-Code-Session-Id") != "abc" || again.Body[0] != '{' {
		t.Error("Requests shares memory with the server's records")
	}
	s.Reset()
	if n := len(s.Requests()); n != 0 {
		t.Errorf("%d records after Reset", n)
	}
}

// TestTurnSelection checks the order header > directive > rules > default.
func TestTurnSelection(t *testing.T) {
	script, err := ParseScript([]byte(`
turns:
  weather:
    kind: tool
    tools: [{name: get_weather, input: {city: Oslo}}]
  text:
    text: "Scripted text wins over the built-in."
rules:
  - when: {api: chat, last_user_contains: weather}
    turn: weather
  - when: {has_tool_results: true, model: "gpt-5*"}
    turn: {kind: text, text: "Finished by rule."}
  - when: {api: openai, model: refuse-me}
    turn: refusal
  - when: {last_user_contains: tidy, declares_tool: Bash}
    turn: {kind: tool, tools: [{name: Bash, input: {command: ls}}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	chat := func(model, tail string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"what is the weather like? "}` + tail + `]}`
	}
	const toolTail = `,{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_1","content":"sunny"}`
	tests := []struct {
		name, path, body, header string
		turn                     string
		want                     map[string]string
	}{
		{"header spec wins", "/v1/chat/completions", chat("gpt-4o", ""), `{"kind":"text","text":"From the header."}`, "header",
			map[string]string{"choices.0.message.content": "From the header."}},
		{"header name", "/v1/chat/completions", chat("gpt-4o", ""), "refusal", "refusal",
			map[string]string{"choices.0.message.refusal": defaultRefusal}},
		{"rule by api and text", "/v1/chat/completions", chat("gpt-4o", ""), "", "weather",
			map[string]string{"choices.0.message.tool_calls.0.function.arguments": `{"city":"Oslo"}`, "choices.0.finish_reason": "tool_calls"}},
		{"rule by tool results and model prefix", "/v1/chat/completions", chat("gpt-5-mini", toolTail), "", "rules[1]",
			map[string]string{"choices.0.message.content": "Finished by rule."}},
		{"rule by api family", "/v1/responses", `{"model":"refuse-me","input":"hi"}`, "", "refusal",
			map[string]string{"output.0.content.0.type": "refusal"}},
		{"script turn shadows a built-in", "/v1/responses", `{"model":"gpt-4o","input":"say it mock:text"}`, "", "text",
			map[string]string{"output.0.content.0.text": "Scripted text wins over the built-in."}},
		{"directive beats rules", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"weather mock:max_tokens"}]}`, "", "max_tokens",
			map[string]string{"choices.0.finish_reason": "length"}},
		{"unknown directive falls through", "/v1/responses", `{"model":"gpt-4o","input":"mock:nope please"}`, "", "default",
			map[string]string{"output.0.content.0.text": "You said: mock:nope please"}},
		{"default echo", "/v1/messages", `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"text","text":"Please   summarize\nthis"}]}]}`, "", "default",
			map[string]string{"content.0.text": "You said: Please summarize this", "stop_reason": "end_turn"}},
		{"default after anthropic tool results", "/v1/messages",
			`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"mock:parallel"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"a","input":{}},{"type":"tool_use","id":"toolu_2","name":"a","input":{}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"hello"},{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"world"}]}]}]}`,
			"", "default_tool_results",
			map[string]string{"content.0.text": `Done: received 2 tool results (first: "hello").`, "stop_reason": "end_turn"}},
		{"default after chat tool results", "/v1/chat/completions", chat("gpt-4o-mini", toolTail), "", "default_tool_results",
			map[string]string{"choices.0.message.content": `Done: received 1 tool result (first: "sunny").`}},
		{"default after responses tool results", "/v1/responses",
			`{"model":"gpt-4o","input":[{"role":"user","content":"mock:tool"},{"type":"function_call","call_id":"call_1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"call_1","output":"42"}]}`,
			"", "default_tool_results",
			map[string]string{"output.0.content.0.text": `Done: received 1 tool result (first: "42").`}},
		{"rule by declared tool", "/v1/messages",
			`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"tidy up"}],"tools":[{"name":"Read","input_schema":{}},{"name":"Bash","input_schema":{}}]}`, "", "rules[3]",
			map[string]string{"content.0.name": "Bash", "content.0.input.command": "ls", "stop_reason": "tool_use"}},
		{"rule by declared tool skips a request without it", "/v1/messages",
			`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"tidy up"}],"tools":[{"name":"Read","input_schema":{}}]}`, "", "default",
			map[string]string{"content.0.text": "You said: tidy up"}},
		{"tool turn without declared tools answers text", "/v1/messages",
			`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"mock:tool"}]}`, "", "tool",
			map[string]string{"content.0.text": noToolsText, "stop_reason": "end_turn"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, url := newMock(t, Options{Script: script})
			h := with(anthropicAuth, "Authorization", "Bearer k")
			if tt.header != "" {
				h[HeaderTurn] = tt.header
			}
			resp, body := do(t, http.MethodPost, url+tt.path, tt.body, h)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			for path, want := range tt.want {
				if got := gjson.GetBytes(body, path).String(); got != want {
					t.Errorf("%s = %q, want %q in %s", path, got, want, body)
				}
			}
			if got := onlyRequest(t, s).Turn; got != tt.turn {
				t.Errorf("turn = %q, want %q", got, tt.turn)
			}
		})
	}
}

func TestPlausibleToolInputs(t *testing.T) {
	tests := []struct {
		name, tool, schema, want string
	}{
		{"claude code Bash", "Bash", `{"type":"object","properties":{"command":{"type":"string"},"timeout":{"type":"number"}},"required":["command"]}`, `{"command":"echo hello"}`},
		{"codex exec_command", "exec_command", `{"type":"object","properties":{"cmd":{"type":"string"},"workdir":{"type":"string"}},"required":["cmd"]}`, `{"cmd":"echo hello"}`},
		{"codex shell", "shell", `{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}}},"required":["command"]}`, `{"command":["bash","-lc","echo hello"]}`},
		{"no schema shell", "Bash", ``, `{"command":"echo hello"}`},
		{"no schema other", "Glob", ``, `{}`},
		{"typed required fields", "Edit", `{"properties":{"file_path":{"type":"string"},"replace_all":{"type":"boolean"},"n":{"type":"integer"},"mode":{"enum":["a","b"]},"opts":{"type":"object"}},"required":["file_path","replace_all","n","mode","opts"]}`,
			`{"file_path":"/tmp/example.txt","replace_all":false,"n":1,"mode":"a","opts":{}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plausibleInput(declaredTool{name: tt.tool, schema: gjson.Parse(tt.schema)})
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestAcceptsGzip(t *testing.T) {
	tests := []struct {
		header string
		want   bool
	}{
		{"gzip", true}, {"GZIP", true}, {"br, gzip;q=0.5", true}, {"zstd,gzip", true}, {"*;q=0.1", true},
		{"", false}, {"identity", false}, {"br", false}, {"gzip;q=0", false}, {"gzip; q=0.0", false},
	}
	for _, tt := range tests {
		if got := acceptsGzip(tt.header); got != tt.want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", tt.header, got, tt.want)
		}
	}
}

// TestAgentLoop runs the loop a real agent runs: a prompt asking for a
// tool, the tool call, the result sent back, and a final text.
func TestAgentLoop(t *testing.T) {
	t.Run("anthropic", func(t *testing.T) {
		s, url := newMock(t, Options{})
		params := anthropicParams("list the files mock:tool")
		first, err := anthropicTurn(t, url, true, params)
		if err != nil || first.StopReason != anthropic.StopReasonToolUse {
			t.Fatalf("first turn: %v %+v", err, first)
		}
		call := first.Content[0]
		params.Messages = append(params.Messages, first.ToParam(),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock(call.ID, "sunny", false)))
		final, err := anthropicTurn(t, url, true, params)
		if err != nil || final.StopReason != anthropic.StopReasonEndTurn || final.Content[0].Text != `Done: received 1 tool result (first: "sunny").` {
			t.Fatalf("final turn: %v %+v", err, final)
		}
		if turns := s.Requests(); len(turns) != 2 || turns[0].Turn != "tool" || turns[1].Turn != "default_tool_results" {
			t.Errorf("turns %q, %q", turns[0].Turn, turns[1].Turn)
		}
	})
	t.Run("responses", func(t *testing.T) {
		_, url := newMock(t, Options{})
		client := openAIClient(url)
		ctx := testContext(t)
		params := responsesParams("check the weather mock:tool")
		first, err := responsesTurn(t, url, true, params)
		if err != nil || len(first.Output) != 1 || first.Output[0].Type != "function_call" {
			t.Fatalf("first turn: %v %+v", err, first)
		}
		fc := first.Output[0]
		output := responses.ResponseInputItemParamOfFunctionCallOutput("rain")
		output.OfFunctionCallOutput.CallID = openai.String(fc.CallID)
		params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("check the weather mock:tool", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfFunctionCall(fc.Arguments.OfString, fc.CallID, fc.Name),
			output,
		}}
		final, err := client.Responses.New(ctx, params)
		if err != nil || final.OutputText() != `Done: received 1 tool result (first: "rain").` {
			t.Fatalf("final turn: %v %q", err, final.OutputText())
		}
	})
}

func TestMaxRecords(t *testing.T) {
	s, url := newMock(t, Options{MaxRecords: 2})
	for _, path := range []string{"/a", "/b", "/c"} {
		do(t, http.MethodGet, url+path, "", openAIAuth)
	}
	reqs := s.Requests()
	if len(reqs) != 2 || reqs[0].Path != "/b" || reqs[1].Path != "/c" {
		t.Errorf("kept %d records: %+v", len(reqs), reqs)
	}
}

func TestRateLimitWindow(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, url := newMock(t, Options{Clock: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}})
	remaining := func() string {
		resp, _ := do(t, http.MethodHead, url+"/", "", openAIAuth)
		return resp.Header.Get("x-ratelimit-remaining-requests")
	}
	got := []string{remaining(), remaining()}
	if err := s.WaitIdle(testContext(t)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	got = append(got, remaining())
	if want := []string{"3999", "3998", "3999"}; !slices.Equal(got, want) {
		t.Errorf("remaining = %v, want %v", got, want)
	}
}
