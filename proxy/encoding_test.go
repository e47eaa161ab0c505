package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"gatekeeper/approvals"
	"gatekeeper/mockprovider"
	"gatekeeper/trajectory"
)

// Compressed replies: a provider may compress a reply it was asked to
// send uncompressed. gatekeeper decodes gzip, deflate, br and zstd, meters
// and gates the decoded reply, and hands the agent the decoded bytes.

// codedTurn is a Bash call gated for team-a, with usage the provider
// reports exactly, in encoding (none when empty).
func codedTurn(encoding string) string {
	return fmt.Sprintf(`{"kind":"tool","first_only":true,"text":"I will clean the build directory now.",`+
		`"tools":[{"name":"Bash","input":{"command":"rm -rf ./build"}}],`+
		`"usage":{"input_tokens":1200,"output_tokens":345,"cache_read_tokens":0,"cache_write_tokens":0,"reasoning_tokens":0},"encoding":%q}`, encoding)
}

// codedAPI is one API as its official SDK calls it.
type codedAPI struct {
	name string
	// base is the SDK's base URL through gatekeeper for run id, and
	// direct the twin mock's.
	base, direct func(e *env, id string) string
	vk, key      string
	call         func(ctx context.Context, base, key, spec string, stream bool) (any, error)
	calls        func(final any) []string // each call as "name input"
}

var codedAPIs = []codedAPI{
	{name: "anthropic", vk: vkA, key: antKey,
		base:   func(e *env, id string) string { return e.gk + "/t/" + id + "/anthropic" },
		direct: func(e *env, _ string) string { return e.twinURL },
		call: func(ctx context.Context, base, key, spec string, stream bool) (any, error) {
			c := antClient(base, key, spec)
			if !stream {
				m, err := c.Messages.New(ctx, bashParams("clean up"))
				if err != nil {
					return nil, err
				}
				return *m, nil
			}
			s := c.Messages.NewStreaming(ctx, bashParams("clean up"))
			defer s.Close()
			var m anthropic.Message
			for s.Next() {
				if err := m.Accumulate(s.Current()); err != nil {
					return nil, err
				}
			}
			return m, s.Err()
		},
		calls: func(final any) []string {
			var out []string
			for _, b := range toolUses(final.(anthropic.Message)) {
				out = append(out, b.Name+" "+string(b.Input))
			}
			return out
		}},
	{name: "chat", vk: vkA, key: oaiKey,
		base:   func(e *env, id string) string { return e.gk + "/t/" + id + "/openai/v1" },
		direct: func(e *env, _ string) string { return e.twinURL + "/v1" },
		call: func(ctx context.Context, base, key, spec string, stream bool) (any, error) {
			c := oaiClient(base, key, spec)
			if !stream {
				r, err := c.Chat.Completions.New(ctx, bashChatParams())
				if err != nil {
					return nil, err
				}
				return *r, nil
			}
			s := c.Chat.Completions.NewStreaming(ctx, bashChatParams())
			defer s.Close()
			acc := openai.ChatCompletionAccumulator{}
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			return acc.ChatCompletion, s.Err()
		},
		calls: func(final any) []string {
			var out []string
			for _, ch := range final.(openai.ChatCompletion).Choices {
				for _, tc := range ch.Message.ToolCalls {
					out = append(out, tc.Function.Name+" "+tc.Function.Arguments)
				}
			}
			return out
		}},
	{name: "responses", vk: vkA, key: oaiKey,
		base:   func(e *env, id string) string { return e.gk + "/t/" + id + "/openai/v1" },
		direct: func(e *env, _ string) string { return e.twinURL + "/v1" },
		call: func(ctx context.Context, base, key, spec string, stream bool) (any, error) {
			r, err := responsesCall(ctx, oaiClient(base, key, spec), bashResponsesParams(), stream)
			if err != nil {
				return nil, err
			}
			return *r, nil
		},
		calls: func(final any) []string {
			var out []string
			r := final.(responses.Response)
			for _, it := range itemsOf(&r, "function_call") {
				out = append(out, it.Name+" "+it.Arguments.OfString)
			}
			return out
		}},
}

// A compressed reply's call is gated like any: held for approval with its
// input as the provider sent it, charged from the usage the provider
// reported, and released decoded, equal to what the SDK reads from the
// provider directly. Every coding, streamed and not, in the three APIs.
func TestCompressedReplyGated(t *testing.T) {
	for _, api := range codedAPIs {
		for _, stream := range []bool{false, true} {
			for _, coding := range mockprovider.Codings {
				t.Run(fmt.Sprintf("%s/%s/%s", api.name, streamName(stream), coding), func(t *testing.T) {
					e := newEnv(t, envOpts{limits: gatesYAML("", "")})
					direct, err := api.call(ctxT(t), api.direct(e, "gz"), api.key, codedTurn(""), stream)
					if err != nil {
						t.Fatal(err)
					}
					type result struct {
						final any
						err   error
					}
					done := make(chan result, 1)
					go func() {
						final, err := api.call(ctxT(t), api.base(e, "gz"), api.vk, codedTurn(coding), stream)
						done <- result{final, err}
					}()
					r := e.pending(t, "gz", 1)[0]
					if r.Call.Name != "Bash" || string(r.Call.Input) != `{"command":"rm -rf ./build"}` {
						t.Fatalf("held call %s %s", r.Call.Name, r.Call.Input)
					}
					rec := e.waitState(t, "gz", trajectory.AwaitingApproval)
					if rec.Turns != 1 || rec.Spend.InputTokens != 1200 || rec.Spend.OutputTokens != 345 || rec.Spend.Estimated {
						t.Fatalf("turns %d, spend %+v, want the reported 1200 in, 345 out", rec.Turns, rec.Spend)
					}
					if _, err := e.vote(t, r.ID, "carol", []string{"secops"}, true); err != nil {
						t.Fatal(err)
					}
					res := <-done
					if res.err != nil {
						t.Fatal(res.err)
					}
					if a, b := mustJSON(t, direct), mustJSON(t, res.final); a != b {
						t.Fatalf("released reply differs from the provider's:\ndirect %s\nvia    %s", a, b)
					}
					if calls := api.calls(res.final); len(calls) != 1 || !strings.HasPrefix(calls[0], "Bash ") || !strings.Contains(calls[0], "rm -rf ./build") {
						t.Fatalf("released calls %q", calls)
					}
					e.waitState(t, "gz", trajectory.WaitingTool)
				})
			}
		}
	}
}

// codedRequest is a turn request of api as an agent sends it over plain
// HTTP, with Accept-Encoding: identity, so that the client decodes
// nothing.
func codedRequest(t *testing.T, e *env, api, id, vk string, stream bool, spec string) *http.Request {
	t.Helper()
	var path, body string
	h := http.Header{"X-Mock-Turn": {spec}, "Accept-Encoding": {"identity"}, "Content-Type": {"application/json"}, "Authorization": {"Bearer " + vk}}
	switch api {
	case "anthropic":
		path, body = "/anthropic/v1/messages", anthropicReq(stream, "clean up")
		h.Del("Authorization")
		h.Set("X-Api-Key", vk)
		h.Set("Anthropic-Version", "2023-06-01")
	case "chat":
		path, body = "/openai/v1/chat/completions", fmt.Sprintf(`{"model":"gpt-4.1","stream":%t,"messages":[{"role":"user","content":"clean up"}],`+
			`"tools":[{"type":"function","function":{"name":"Bash","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}]}`, stream)
	default:
		path, body = "/openai/v1/responses", fmt.Sprintf(`{"model":"gpt-4.1","stream":%t,"input":"clean up",`+
			`"tools":[{"type":"function","name":"Bash","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}]}`, stream)
	}
	req, err := http.NewRequestWithContext(ctxT(t), "POST", e.gk+"/t/"+id+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	return req
}

// codedRawTurn sends codedRequest.
func codedRawTurn(t *testing.T, e *env, api, id, vk string, stream bool, spec string) *http.Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(codedRequest(t, e, api, id, vk, stream, spec))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Without gates, a compressed reply reaches the agent decoded, without
// Content-Encoding and with a Content-Length (when it has one) of its
// decoded bytes; its call is recorded pending and its usage charged.
func TestCompressedReplyDecodedForTheAgent(t *testing.T) {
	for _, api := range []string{"anthropic", "chat", "responses"} {
		for _, stream := range []bool{false, true} {
			for _, coding := range mockprovider.Codings {
				t.Run(fmt.Sprintf("%s/%s/%s", api, streamName(stream), coding), func(t *testing.T) {
					e := newEnv(t, envOpts{})
					resp := codedRawTurn(t, e, api, "gz", vkB, stream, codedTurn(coding))
					body := readAll(t, resp)
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("%d %s", resp.StatusCode, body)
					}
					if ce := resp.Header.Get("Content-Encoding"); ce != "" {
						t.Fatalf("Content-Encoding %q reached the agent", ce)
					}
					if cl := resp.Header.Get("Content-Length"); cl != "" && cl != fmt.Sprint(len(body)) {
						t.Fatalf("Content-Length %s for %d bytes", cl, len(body))
					}
					if stream && !strings.HasPrefix(string(body), "event: ") && !strings.HasPrefix(string(body), "data: ") {
						t.Fatalf("not an event stream: %.80q", body)
					}
					if !stream && !gjson.ValidBytes(body) {
						t.Fatalf("not JSON: %.80q", body)
					}
					// The provider's reply uncompressed, from its twin.
					req := codedRequest(t, e, api, "gz", oaiKey, stream, codedTurn(""))
					req.URL.Host, req.URL.Path = strings.TrimPrefix(e.twinURL, "http://"), strings.TrimPrefix(req.URL.Path, "/t/gz/openai")
					if api == "anthropic" {
						req.Header.Set("X-Api-Key", antKey)
						req.URL.Path = strings.TrimPrefix(req.URL.Path, "/t/gz/anthropic")
					}
					direct, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					if want := readAll(t, direct); string(body) != string(want) {
						t.Fatalf("the agent got:\n%s\nthe provider sent:\n%s", body, want)
					}
					var rec *trajectory.Record
					waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "gz"); return rec.Turns == 1 })
					if rec.State != trajectory.WaitingTool || len(rec.Pending.ToolCalls) != 1 || rec.Pending.ToolCalls[0].Name != "Bash" {
						t.Fatalf("state %s, pending %+v", rec.State, rec.Pending.ToolCalls)
					}
					if rec.Spend.InputTokens != 1200 || rec.Spend.OutputTokens != 345 || rec.Spend.Estimated {
						t.Fatalf("spend %+v, want the reported 1200 in, 345 out", rec.Spend)
					}
				})
			}
		}
	}
}

// A reply in a coding gatekeeper does not decode (or several stacked)
// is refused with the provider's error format and not delivered: its
// call unseen cannot go out ungated. The turn is a failed upstream call:
// no turn of the run, charged nothing, as nothing of it could be read.
func TestUnknownCodingRefused(t *testing.T) {
	for _, api := range []string{"anthropic", "chat", "responses"} {
		for _, stream := range []bool{false, true} {
			for _, coding := range []string{"foo", "gzip, foo", "gzip, gzip", "compress"} {
				t.Run(fmt.Sprintf("%s/%s/%s", api, streamName(stream), coding), func(t *testing.T) {
					e := newEnv(t, envOpts{limits: gatesYAML("", "")})
					resp := codedRawTurn(t, e, api, "gz", vkA, stream, codedTurn(coding))
					body := readAll(t, resp)
					if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("X-Should-Retry") != "false" || resp.Header.Get("Content-Encoding") != "" {
						t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
					}
					typ, msg := gjson.GetBytes(body, "error.type").String(), gjson.GetBytes(body, "error.message").String()
					if api == "anthropic" && gjson.GetBytes(body, "type").String() != "error" || typ != "upstream_error" ||
						!strings.Contains(msg, fmt.Sprintf("%q", coding)) || strings.Contains(string(body), "rm -rf") {
						t.Fatalf("error body %s", body)
					}
					waitFor(t, "the failed call recorded", func() bool {
						for _, ev := range e.events(t, "gz") {
							if ev.Type == trajectory.EventUpstreamError && strings.Contains(string(ev.Data), "does not decode") {
								return true
							}
						}
						return false
					})
					rec := e.waitState(t, "gz", trajectory.Ready)
					if rec.Turns != 0 || len(rec.Pending.ToolCalls) != 0 || rec.Spend.InputTokens != 0 || rec.Spend.OutputTokens != 0 ||
						rec.Spend.Dollars != 0 || rec.LastStopReason != "error" {
						t.Fatalf("turns %d stop %q pending %+v spend %+v", rec.Turns, rec.LastStopReason, rec.Pending.ToolCalls, rec.Spend)
					}
					if reqs, err := e.apst.List(context.Background(), approvals.Filter{Trajectory: "gz", Limit: 10}); err != nil || len(reqs) != 0 {
						t.Fatalf("approval requests %d, %v", len(reqs), err)
					}
				})
			}
		}
	}
}

// A compressed reply whose bytes break off or were never compressed is
// not delivered as a reply: the call in it never reaches the agent, and
// the turn ends in an error with nothing pending.
func TestMalformedCompressedReply(t *testing.T) {
	type fault struct{ coding, fault string }
	faults := []fault{{"gzip", "plain"}, {"deflate", "plain"}, {"zstd", "plain"}}
	for _, c := range mockprovider.Codings {
		faults = append(faults, fault{c, "cut"})
	}
	for _, stream := range []bool{false, true} {
		for _, f := range faults {
			for _, gated := range []bool{false, true} {
				vk, tenant := vkB, "ungated"
				if gated {
					vk, tenant = vkA, "gated"
				}
				t.Run(fmt.Sprintf("%s/%s/%s/%s", streamName(stream), f.coding, f.fault, tenant), func(t *testing.T) {
					e := newEnv(t, envOpts{limits: gatesYAML("", "")})
					spec := strings.Replace(codedTurn(f.coding), `"encoding"`, `"encoding_fault":"`+f.fault+`","encoding"`, 1)
					resp, err := http.DefaultClient.Do(codedRequest(t, e, "anthropic", "gz", vk, stream, spec))
					var body []byte
					if err == nil { // else the connection was dropped before any byte
						body, err = io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode == http.StatusOK && err == nil {
							t.Fatalf("a broken reply was delivered whole: %s", body)
						}
						if !stream && resp.StatusCode != http.StatusBadGateway {
							t.Fatalf("a broken whole reply: %d %s", resp.StatusCode, body)
						}
					}
					if strings.Contains(string(body), "rm -rf") {
						t.Fatalf("the call reached the agent: %s", body)
					}
					var rec *trajectory.Record
					waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "gz"); return rec.Turns == 1 })
					if rec.State != trajectory.Ready || len(rec.Pending.ToolCalls) != 0 || rec.LastStopReason != "error" {
						t.Fatalf("state %s stop %q pending %+v", rec.State, rec.LastStopReason, rec.Pending.ToolCalls)
					}
					if ev := e.turnEvent(t, "gz"); !strings.Contains(ev, "malformed for their content coding") {
						t.Fatalf("turn event %s", ev)
					}
				})
			}
		}
	}
}

// A compressed reply that decodes past limits.max_body_bytes (or, for a
// stream, an event past limits.max_event_bytes) meets the bound where
// the same reply uncompressed does, though its compressed bytes are well
// within it: the same status, the same bytes delivered, the same bytes
// read (its estimated charge). With gates, a whole reply is read no
// further than the bound.
func TestCompressedBombBounded(t *testing.T) {
	const limit = 64 << 10
	big := strings.Repeat("all work and no play ", (2<<20)/21) // 2 MiB, a few KiB compressed
	script := &mockprovider.Script{Turns: map[string]mockprovider.TurnSpec{}}
	for _, c := range append([]string{""}, mockprovider.Codings...) {
		script.Turns["big"+c] = mockprovider.TurnSpec{Kind: mockprovider.KindText, Text: big, Deltas: 1, Encoding: c}
	}
	type outcome struct {
		status    int
		delivered int64
		in, out   int64
		estimate  bool
		err       bool // the body broke off
	}
	for _, stream := range []bool{false, true} {
		for _, gated := range []bool{false, true} {
			vk, tenant := vkB, "ungated"
			if gated {
				vk, tenant = vkA, "gated"
			}
			var want outcome
			for _, c := range append([]string{""}, mockprovider.Codings...) {
				t.Run(fmt.Sprintf("%s/%s/%q", streamName(stream), tenant, c), func(t *testing.T) {
					e := newEnv(t, envOpts{script: script, limits: gatesYAML("", fmt.Sprintf("\nlimits: {max_body_bytes: %d, max_event_bytes: %d}\n", limit, limit))})
					resp := codedRawTurn(t, e, "anthropic", "bomb", vk, stream, "big"+c)
					n, err := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					var rec *trajectory.Record
					waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "bomb"); return rec.Turns == 1 })
					got := outcome{status: resp.StatusCode, delivered: n, in: rec.Spend.InputTokens, out: rec.Spend.OutputTokens, estimate: rec.Spend.Estimated, err: err != nil}
					if gated && (rec.LastStopReason != "error" || got.out > limit/4+1 || n > limit) {
						t.Fatalf("stop %q, spend %+v, %d bytes delivered: read past the bound", rec.LastStopReason, rec.Spend, n)
					}
					if c == "" {
						want = got
						return
					}
					if got != want {
						t.Fatalf("compressed: %+v, uncompressed: %+v", got, want)
					}
				})
			}
		}
	}
}

// The provider's error reply, compressed, reaches the agent decoded with
// its status and wording; in a coding gatekeeper does not decode it keeps
// its status, its body replaced by gatekeeper's own message, since it
// could not be checked for key fragments.
func TestCompressedErrorReply(t *testing.T) {
	for _, coding := range append([]string{"foo"}, mockprovider.Codings...) {
		t.Run(coding, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			resp := codedRawTurn(t, e, "anthropic", "gz", vkA, false,
				fmt.Sprintf(`{"kind":"http_error","status":400,"error_type":"invalid_request_error","error_message":"messages: bad order","encoding":%q}`, coding))
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Content-Length") != fmt.Sprint(len(body)) {
				t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
			}
			want := "messages: bad order"
			if coding == "foo" {
				want = "with a body gatekeeper could not check for key fragments"
			}
			if msg := gjson.GetBytes(body, "error.message").String(); !strings.Contains(msg, want) {
				t.Fatalf("message %q, want %q", msg, want)
			}
		})
	}
}

// A held turn's continuation leaves through the same send: its reply,
// compressed, is decoded and spliced after the refusal, and charged from
// the usage the provider reported.
func TestCompressedContinuation(t *testing.T) {
	cont := mockprovider.TurnSpec{Kind: mockprovider.KindText, Text: "Understood, I will not delete anything.", Encoding: "zstd",
		Usage: &mockprovider.Usage{InputTokens: new(int64(900)), OutputTokens: new(int64(77))}}
	yes := true
	script := &mockprovider.Script{Rules: []mockprovider.Rule{{When: mockprovider.Match{HasToolResults: &yes}, Turn: mockprovider.TurnRef{Spec: &cont}}}}
	for _, stream := range []bool{false, true} {
		t.Run(streamName(stream), func(t *testing.T) {
			e := newEnv(t, envOpts{limits: gatesYAML("", ""), script: script})
			done := make(chan error, 1)
			var via any
			go func() {
				var err error
				via, err = codedAPIs[0].call(ctxT(t), codedAPIs[0].base(e, "gz"), vkA, codedTurn("br"), stream)
				done <- err
			}()
			r := e.pending(t, "gz", 1)[0]
			if _, err := e.vote(t, r.ID, "carol", []string{"secops"}, false); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			m := via.(anthropic.Message)
			if text := messageText(m); len(toolUses(m)) != 0 || !strings.Contains(text, "Understood, I will not delete anything.") {
				t.Fatalf("reply after the refusal: %s", mustJSON(t, m))
			}
			rec := e.waitState(t, "gz", trajectory.Ready)
			if rec.Turns != 2 || rec.Spend.InputTokens != 1200+900 || rec.Spend.OutputTokens != 345+77 || rec.Spend.Estimated {
				t.Fatalf("turns %d, spend %+v, want the reported 2100 in, 422 out", rec.Turns, rec.Spend)
			}
		})
	}
}
