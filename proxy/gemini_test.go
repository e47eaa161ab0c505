package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"gatekeeper/approvals"
	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/gemini"
	"gatekeeper/trajectory"
)

// Gemini turns through gatekeeper, as Gemini CLI sends them: the model and
// the streaming in the path, the key in x-goog-api-key (or the query), a
// Bash function declared.

const (
	gemStream = "/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
	gemWhole  = "/gemini/v1beta/models/gemini-2.5-flash:generateContent"
)

func gemBody(prompt string) string {
	return fmt.Sprintf(`{"contents":[{"role":"user","parts":[{"text":%q}]}],
"systemInstruction":{"role":"user","parts":[{"text":"You are a CLI agent."}]},
"tools":[{"functionDeclarations":[{"name":"Bash","parametersJsonSchema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}]}],
"generationConfig":{"temperature":0}}`, prompt)
}

// gemSDKLine is how the Gemini SDKs find each event: a "data: " line and
// a blank line; anything else stalls their parser.
var gemSDKLine = regexp.MustCompile(`^\s*data: (.*)(?:\n\n|\r\r|\r\n\r\n)`)

// gemRead checks that every byte of a stream is read by the Gemini SDKs'
// parser, and decodes it.
func gemRead(t testing.TB, stream []byte) *streaming.Result {
	t.Helper()
	buf := string(stream)
	for buf != "" {
		m := gemSDKLine.FindStringSubmatch(buf)
		if m == nil || !gjson.Valid(m[1]) {
			t.Fatalf("the Gemini SDK's parser stalls at %q", buf)
		}
		buf = buf[len(m[0]):]
	}
	return streamtest.MustDecode(t, gemini.Dialect{}, stream)
}

func (e *env) gemini(t testing.TB, path, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	resp := e.do(t, http.MethodPost, path, body, append([]string{"Content-Type", "application/json"}, hdr...)...)
	return resp, readAll(t, resp)
}

func TestGeminiTurn(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp, b := e.gemini(t, "/t/gem-1"+gemStream, gemBody("hello there"), "x-goog-api-key", vkA)
	if resp.StatusCode != 200 || resp.Header.Get("X-Gatekeeper-Trajectory") != "gem-1" {
		t.Fatalf("%d %v: %s", resp.StatusCode, resp.Header, b)
	}
	res := gemRead(t, b)
	body, err := (gemini.Dialect{}).AssembleJSON(b)
	if err != nil || res.StopReason() != streaming.StopEndTurn || gjson.GetBytes(body, "candidates.0.content.parts.0.text").Str != "You said: hello there" {
		t.Fatalf("reply %+v\n%s", res, b)
	}
	// Not streamed, the key in the query.
	resp, b = e.gemini(t, "/t/gem-1"+gemWhole+"?key="+vkA, gemBody("again"))
	if whole, err := (gemini.Dialect{}).DecodeJSON(b); resp.StatusCode != 200 || err != nil || whole.TextBytes == 0 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	reqs := e.mock.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests upstream", len(reqs))
	}
	for _, r := range reqs {
		if r.APIKey != gemKey || strings.Contains(r.RawQuery, "key") || strings.Contains(fmt.Sprint(r.Header), vkA) {
			t.Errorf("upstream request %s?%s carried key %q, headers %v", r.Path, r.RawQuery, r.APIKey, r.Header)
		}
	}
	if reqs[0].RawQuery != "alt=sse" || reqs[0].Model != "gemini-2.5-flash" || !reqs[0].Stream || reqs[1].Stream {
		t.Errorf("upstream %q model %q stream %v/%v", reqs[0].RawQuery, reqs[0].Model, reqs[0].Stream, reqs[1].Stream)
	}
	var rec *trajectory.Record
	waitFor(t, "both turns charged", func() bool { rec = e.record(t, "gem-1"); return rec.Spend.Turns == 2 })
	if rec.Spend.Dollars <= 0 || rec.Spend.Estimated || rec.Spend.InputTokens == 0 || rec.Spend.OutputTokens == 0 {
		t.Errorf("spend %+v", rec.Spend)
	}

	// Refusals in Google's format, the HTTP status in error.code.
	for _, tc := range []struct {
		name, path, body string
		hdr              []string
		status           int
		gstatus          string
	}{
		{"no key", gemStream, gemBody("x"), nil, 401, "UNAUTHENTICATED"},
		{"stream without alt=sse", strings.TrimSuffix(gemStream, "?alt=sse"), gemBody("x"), []string{"x-goog-api-key", vkA}, 400, "INVALID_ARGUMENT"},
		{"alt twice", gemStream + "&alt=json", gemBody("x"), []string{"x-goog-api-key", vkA}, 400, "INVALID_ARGUMENT"},
		{"whole reply as SSE", gemWhole + "?alt=sse", gemBody("x"), []string{"x-goog-api-key", vkA}, 400, "INVALID_ARGUMENT"},
		{"string limit", gemStream, `{"contents":[],"generationConfig":{"maxOutputTokens":"9"}}`, []string{"x-goog-api-key", vkA}, 400, "INVALID_ARGUMENT"},
		{"unknown route", "/gemini/v1beta/models/m:embedContent", gemBody("x"), []string{"x-goog-api-key", vkA}, 404, "NOT_FOUND"},
	} {
		resp, b := e.gemini(t, tc.path, tc.body, tc.hdr...)
		if resp.StatusCode != tc.status || gjson.GetBytes(b, "error.code").Int() != int64(tc.status) || gjson.GetBytes(b, "error.status").Str != tc.gstatus {
			t.Errorf("%s: %d %s", tc.name, resp.StatusCode, b)
		}
	}

	// countTokens passes, with the pool's key, unmetered.
	resp, b = e.gemini(t, "/gemini/v1beta/models/gemini-2.5-flash:countTokens", gemBody("count me"), "x-goog-api-key", vkA)
	if resp.StatusCode != 200 || gjson.GetBytes(b, "totalTokens").Int() == 0 {
		t.Errorf("countTokens: %d %s", resp.StatusCode, b)
	}
	if reqs := e.mock.Requests(); reqs[len(reqs)-1].APIKey != gemKey {
		t.Errorf("countTokens went up with key %q", reqs[len(reqs)-1].APIKey)
	}
}

// TestGeminiGate: a gated Gemini call is held until an approver decides,
// with keepalive chunks the SDKs read; approved, the call goes out as the
// provider sent it; denied, the model is asked again with the refusal as
// the call's functionResponse and the agent gets one reply without the
// call.
func TestGeminiGate(t *testing.T) {
	for _, approve := range []bool{true, false} {
		for _, streamed := range []bool{true, false} {
			t.Run(fmt.Sprintf("approve=%v streamed=%v", approve, streamed), func(t *testing.T) {
				e := newEnv(t, envOpts{limits: gatesYAML("", "")})
				path := gemStream
				if !streamed {
					path = gemWhole
				}
				type reply struct {
					status int
					body   []byte
				}
				done := make(chan reply, 1)
				go func() {
					req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPost, e.gk+"/t/gem-gate"+path, strings.NewReader(gemBody("clean up")))
					req.Header.Set("x-goog-api-key", vkA)
					req.Header.Set("X-Mock-Turn", bashTurn("rm -rf ./build"))
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						done <- reply{status: -1, body: []byte(err.Error())}
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					done <- reply{resp.StatusCode, b}
				}()
				r := e.pending(t, "gem-gate", 1)[0]
				e.waitState(t, "gem-gate", trajectory.AwaitingApproval)
				if r.Call.Name != "Bash" || !jsonEqual(t, r.Call.Input, []byte(`{"command":"rm -rf ./build"}`)) || !strings.HasPrefix(r.CallID, "gk-call-") {
					t.Fatalf("request call %s %s %s", r.CallID, r.Call.Name, r.Call.Input)
				}
				time.Sleep(100 * time.Millisecond) // a few keepalives
				if _, err := e.vote(t, r.ID, "carol", []string{"secops"}, approve); err != nil {
					t.Fatal(err)
				}
				var got reply
				select {
				case got = <-done:
				case <-time.After(20 * time.Second):
					t.Fatal("no reply within 20 s")
				}
				if got.status != 200 {
					t.Fatalf("status %d: %s", got.status, got.body)
				}
				var res *streaming.Result
				if streamed {
					res = gemRead(t, got.body)
					if n := bytes.Count(got.body, []byte(`"parts":[]`)); n == 0 {
						t.Errorf("no keepalive chunk while held:\n%s", got.body)
					}
				} else {
					var err error
					if res, err = (gemini.Dialect{}).DecodeJSON(got.body); err != nil {
						t.Fatal(err)
					}
				}
				bodies := e.turnRequests()
				if approve {
					if len(res.ToolCalls) != 1 || res.ToolCalls[0].ID != r.CallID || !jsonEqual(t, res.ToolCalls[0].Arguments, []byte(`{"command":"rm -rf ./build"}`)) {
						t.Fatalf("released calls %+v", res.ToolCalls)
					}
					e.waitState(t, "gem-gate", trajectory.WaitingTool)
					if len(bodies) != 1 {
						t.Errorf("%d turns upstream", len(bodies))
					}
					return
				}
				text := string(got.body)
				if streamed {
					whole, err := (gemini.Dialect{}).AssembleJSON(got.body)
					if err != nil {
						t.Fatal(err)
					}
					text = string(whole)
				}
				if len(res.ToolCalls) != 0 || !strings.Contains(text, "I will clean the build directory now.") || !strings.Contains(text, "Done: received 1 tool result") {
					t.Fatalf("reply after denial: %+v\n%s", res.ToolCalls, got.body)
				}
				if len(bodies) != 2 {
					t.Fatalf("%d turns upstream", len(bodies))
				}
				cont := gjson.GetBytes(bodies[1], "contents").Array()
				last := cont[len(cont)-1]
				if last.Get("parts.0.functionResponse.name").Str != "Bash" || !strings.Contains(last.Raw, approvals.ReasonDenied) ||
					cont[len(cont)-2].Get("role").Str != "model" {
					t.Errorf("continuation ends %s", last.Raw)
				}
				if reqs := e.mock.Requests(); reqs[1].Model != "gemini-2.5-flash" || reqs[1].Stream != streamed {
					t.Errorf("continuation went to %s?%s", reqs[1].Path, reqs[1].RawQuery)
				}
			})
		}
	}
}

// TestGeminiBudgetHalt: a run whose budget is spent is refused 402 in
// Google's error format, and nothing reaches the provider.
func TestGeminiBudgetHalt(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.seed(t, "gem-spent", 10, 9.9999)
	for _, path := range []string{gemStream, gemWhole} {
		resp, b := e.gemini(t, "/t/gem-spent"+path, gemBody("more"), "x-goog-api-key", vkA)
		if resp.StatusCode != http.StatusPaymentRequired || gjson.GetBytes(b, "error.code").Int() != 402 ||
			gjson.GetBytes(b, "error.status").Str != "FAILED_PRECONDITION" || !strings.Contains(gjson.GetBytes(b, "error.message").Str, "budget") {
			t.Errorf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
	if n := len(e.mock.Requests()); n != 0 {
		t.Errorf("%d requests reached the provider", n)
	}
}

// TestGeminiCancelMidStream: an operator's cancel ends a streaming Gemini
// reply with Google's error chunk, no half of a call, and the provider's
// connection closed.
func TestGeminiCancelMidStream(t *testing.T) {
	e := newEnv(t, envOpts{realClock: true})
	done := make(chan []byte, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPost, e.gk+"/t/gem-cancel"+gemStream, strings.NewReader(gemBody("clean up")))
		req.Header.Set("x-goog-api-key", vkA)
		req.Header.Set("X-Mock-Turn", `{"kind":"tool","text":"Cleaning up the old builds one by one now, slowly.","event_delay":"40ms","tools":[{"name":"Bash","input":{"command":"rm -rf /srv"}}]}`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- []byte(err.Error())
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- b
	}()
	waitFor(t, "the call in flight", func() bool {
		rec, err := e.store.Get(context.Background(), "gem-cancel")
		return err == nil && rec.State == trajectory.CallingModel && len(e.mock.Requests()) == 1 && len(e.mock.Requests()[0].EventTimes) >= 2
	})
	e.control(t, "gem-cancel", "cancel", `{"reason":"stop"}`)
	var b []byte
	select {
	case b = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not end within 20 s")
	}
	res := gemRead(t, b)
	if len(res.ToolCalls) != 0 || len(res.Errors) != 1 || res.Errors[0].Type != "ABORTED" {
		t.Fatalf("after cancel: %+v\n%s", res, b)
	}
	waitFor(t, "the provider to see its connection closed", func() bool {
		reqs := e.mock.Requests()
		return reqs[0].Canceled || reqs[0].Aborted
	})
	var rec *trajectory.Record
	waitFor(t, "the record to end", func() bool { rec = e.record(t, "gem-cancel"); return rec.State.Terminal() })
	if rec.State != trajectory.Canceled || rec.Spend.OutputTokens == 0 {
		t.Errorf("record %s spend %+v", rec.State, rec.Spend)
	}
	resp, body := e.gemini(t, "/t/gem-cancel"+gemStream, gemBody("again"), "x-goog-api-key", vkA)
	if resp.StatusCode != http.StatusForbidden || gjson.GetBytes(body, "error.code").Int() != 403 {
		t.Errorf("after cancel: %d %s", resp.StatusCode, body)
	}
}

// TestGeminiCompressed: a Gemini reply the provider compressed is
// decoded, metered at the usage it reports, its call recorded as awaited;
// the agent gets it uncompressed.
func TestGeminiCompressed(t *testing.T) {
	for _, coding := range []string{"gzip", "br", "zstd", "deflate"} {
		t.Run(coding, func(t *testing.T) {
			e := newEnv(t, envOpts{limits: gatesYAML("", "")})
			spec := fmt.Sprintf(`{"kind":"tool","first_only":true,"text":"Checking.","tools":[{"name":"Bash","input":{"command":"ls"}}],`+
				`"usage":{"input_tokens":1200,"output_tokens":345,"cache_read_tokens":0,"cache_write_tokens":0,"reasoning_tokens":0},"encoding":%q}`, coding)
			resp, b := e.gemini(t, "/t/gem-z"+gemStream, gemBody("look"), "x-goog-api-key", vkA, "X-Mock-Turn", spec)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "" {
				t.Fatalf("%d %v: %q", resp.StatusCode, resp.Header, b)
			}
			res := gemRead(t, b)
			if len(res.ToolCalls) != 1 || res.Usage.InputTokens != 1200 || res.Usage.OutputTokens != 345 {
				t.Fatalf("reply %+v", res)
			}
			var rec *trajectory.Record
			waitFor(t, "the turn charged", func() bool { rec = e.record(t, "gem-z"); return rec.Spend.Turns == 1 })
			if rec.Spend.InputTokens != 1200 || rec.Spend.OutputTokens != 345 || rec.Spend.Estimated {
				t.Errorf("spend %+v", rec.Spend)
			}
			if rec.State != trajectory.WaitingTool {
				t.Errorf("state %s", rec.State)
			}
		})
	}
}

// TestGeminiOutputClamp: the tenant's output ceiling is set in the
// request's generation config as the agent spelled it, never as a second
// config in the other spelling.
func TestGeminiOutputClamp(t *testing.T) {
	e := newEnv(t, envOpts{teamAExtra: "    call_limits: {max_output_tokens: 100}"})
	for _, tc := range []struct{ config, path string }{
		{`"generation_config":{"temperature":0}`, "generation_config.max_output_tokens"},
		{`"generationConfig":{"maxOutputTokens":5000}`, "generationConfig.maxOutputTokens"},
		{`"systemInstruction":{"parts":[{"text":"x"}]}`, "generationConfig.maxOutputTokens"},
	} {
		body := `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],` + tc.config + `}`
		if resp, b := e.gemini(t, "/t/gem-clamp"+gemWhole, body, "x-goog-api-key", vkA); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", tc.config, resp.StatusCode, b)
		}
		reqs := e.mock.Requests()
		up := reqs[len(reqs)-1].Body
		other := "generationConfig"
		if strings.HasPrefix(tc.path, "generationConfig") {
			other = "generation_config"
		}
		if gjson.GetBytes(up, tc.path).Int() != 100 || gjson.GetBytes(up, other).Exists() {
			t.Errorf("%s: upstream body %s", tc.config, up)
		}
	}
}
