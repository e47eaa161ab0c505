package proxy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/meter"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
	"gatekeeper/trajectory"

	"gatekeeper/streaming/anthropic"

	"gatekeeper/streaming/chat"

	"gatekeeper/streaming/responses"
)

// TestFixtureBytesThroughGatekeeper sends every recorded stream of the
// three turn APIs through gatekeeper, cut at random points on the upstream
// side, and checks the agent receives exactly the bytes the provider sent.
func TestFixtureBytesThroughGatekeeper(t *testing.T) {
	var expected map[string]struct {
		API   string          `json:"api"`
		Usage json.RawMessage `json:"usage"`
	}
	fixturetest.Expected(t, &expected)
	var current []byte
	rnd := rand.New(rand.NewPCG(3, 5))
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		f := w.(http.Flusher)
		for rest := current; len(rest) > 0; {
			n := min(len(rest), 1+rnd.IntN(700))
			_, _ = w.Write(rest[:n])
			f.Flush()
			rest = rest[n:]
		}
	}))
	defer up.Close()
	// Priced at fixed rates so the charge can be worked out from the
	// recorded usage alone.
	prices := map[string]meter.Price{
		"claude-sonnet-4-5": {Input: 3, CachedInput: 0.30, CacheWrite: 3.75, Output: 15},
		"gpt-4o":            {Input: 2.50, CachedInput: 1.25, Output: 10},
	}
	e := newEnv(t, envOpts{upstream: up.URL, limits: `prices:
  claude-sonnet-4-5: {input: 3, cached_input: 0.30, cache_write: 3.75, output: 15}
  gpt-4o: {input: 2.50, cached_input: 1.25, output: 10}`})
	// The turn is priced for the model the reply names, by the table the
	// proxy uses: the default one with the two prices above over it.
	table, err := meter.DefaultTable().With(prices)
	if err != nil {
		t.Fatal(err)
	}
	replyModel := regexp.MustCompile(`"model":"([^"]+)"`)
	paths := map[string]string{"anthropic": "/anthropic/v1/messages", "chat": "/openai/v1/chat/completions", "responses": "/openai/v1/responses"}
	n := 0
	for name, exp := range expected {
		path, ok := paths[exp.API]
		if !ok {
			continue // Gemini is not a turn API of gatekeeper's
		}
		n++
		t.Run(name, func(t *testing.T) {
			b := fixturetest.Read(t, name)
			current = b
			id := "fx-" + name[:min(len(name), 40)]
			id = sanitize(id)
			model := "gpt-4o"
			if exp.API == "anthropic" {
				model = "claude-sonnet-4-5"
			}
			// The chat client asks for usage itself, so the recorded
			// bytes pass untouched.
			body := `{"model":"` + model + `","stream":true,"stream_options":{"include_usage":true},"max_tokens":100,"messages":[{"role":"user","content":"x"}],"input":"x"}`
			resp := e.do(t, "POST", "/t/"+id+path, body, "x-api-key", vkA, "Authorization", "Bearer "+vkA)
			got := readAll(t, resp)
			if !bytes.Equal(got, b) {
				// Tool calls are held until the reply's stop, so a ping or
				// a second choice's events sent during a call go out
				// before it: the same events, in another order.
				g, w := sseEvents(got), sseEvents(b)
				slices.Sort(g)
				slices.Sort(w)
				if !slices.Equal(g, w) {
					t.Fatalf("agent received %d bytes that differ from the provider's %d beyond the order of events", len(got), len(b))
				}
				if a, b := decodedFacts(t, exp.API, got), decodedFacts(t, exp.API, b); a != b {
					t.Fatalf("the agent's reply decodes to %s, the provider's to %s", a, b)
				}
			}
			var rec *trajectory.Record
			waitFor(t, "turn recorded", func() bool { rec = e.record(t, id); return rec.State != trajectory.CallingModel })
			reported := string(exp.Usage) != "null"
			if rec.Spend.Estimated == reported {
				t.Errorf("provider reported usage: %v; record charged %+v", reported, rec.Spend)
			}
			if !reported || rec.Spend.Estimated {
				return
			}
			u, err := fixturetest.Usage(exp.API, exp.Usage)
			if err != nil {
				t.Fatal(err)
			}
			priced := model
			if m := replyModel.FindSubmatch(current); m != nil {
				priced = string(m[1])
			}
			want := table.Cost(priced, u)
			if got := math.Round(rec.Spend.Dollars * 100); got != math.Round(want.Dollars()*100) || math.Abs(rec.Spend.Dollars-want.Dollars()) > 1e-9 {
				t.Errorf("charged $%.6f for %+v, the table prices it $%.6f at %s", rec.Spend.Dollars, u, want.Dollars(), priced)
			}
		})
	}
	if n < 30 {
		t.Errorf("only %d fixtures of the three turn APIs", n)
	}
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// TestCleanEndMidToolCallAborts: a provider stream that ends cleanly in the
// middle of a tool call (no message_stop) must not end cleanly for the
// agent: real agents take a clean end as success and drop the call.
func TestCleanEndMidToolCallAborts(t *testing.T) {
	half := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Bash\",\"input\":{}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\": \\\"rm -rf /tm\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_blo"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush() // chunked: the end of the body is a clean end, not a short Content-Length
		_, _ = w.Write([]byte(half))
	}))
	defer up.Close()
	e := newEnv(t, envOpts{upstream: up.URL})
	resp := e.do(t, "POST", "/t/half/anthropic/v1/messages", anthropicReq(true, "clean up"), hdr()...)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("the agent saw a clean end after half a tool call:\n%s", got)
	}
	if bytes.Contains(got, []byte("content_blo\"")) || bytes.HasSuffix(got, []byte("content_blo")) {
		t.Error("half an event was forwarded")
	}
	var rec *trajectory.Record
	waitFor(t, "turn recorded", func() bool { rec = e.record(t, "half"); return rec.State == trajectory.Ready })
	if rec.LastStopReason != "error" || len(rec.Pending.ToolCalls) != 0 || !rec.Spend.Estimated {
		t.Errorf("record: stop %q pending %v spend %+v", rec.LastStopReason, rec.Pending.ToolCalls, rec.Spend)
	}
}

// decodedFacts is what an SSE reply says: its stop and its tool calls.
func decodedFacts(t *testing.T, api string, b []byte) string {
	t.Helper()
	dialects := map[string]streaming.Dialect{"anthropic": anthropic.Dialect{}, "chat": chat.Dialect{}, "responses": responses.Dialect{}}
	dec := dialects[api].NewDecoder()
	if err := sse.Each(b, func(ev *sse.Event) error { dec.Decode(ev, nil); return nil }); err != nil {
		t.Fatal(err)
	}
	res := dec.Finish()
	out := fmt.Sprint(res.Stops)
	for _, c := range res.ToolCalls {
		out += fmt.Sprintf(" %d:%s:%s:%s", c.Choice, c.ID, c.Name, c.Arguments)
	}
	return out
}
