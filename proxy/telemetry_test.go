package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"gatekeeper/telemetry"
	"gatekeeper/trajectory"
)

const agentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"

// TestTurnSpans checks the span of a streamed tool-call turn on each API:
// its name, kind and GenAI attributes, its parent (the agent's trace
// context), the trace context sent upstream, and the trajectory's
// transitions as span events.
func TestTurnSpans(t *testing.T) {
	cases := []struct{ name, path, body, provider string }{
		{"anthropic", "/t/span-a/anthropic/v1/messages", anthropicReq(true, "check the weather"), "anthropic"},
		{"chat", "/t/span-c/openai/v1/chat/completions", `{"model":"gpt-4.1","stream":true,"messages":[{"role":"user","content":"check"}],"tools":[{"type":"function","function":{"name":"Bash","parameters":{"type":"object"}}}]}`, "openai"},
		{"responses", "/t/span-r/openai/v1/responses", `{"model":"gpt-4.1","stream":true,"input":"check","tools":[{"type":"function","name":"Bash","parameters":{"type":"object"}}]}`, "openai"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tel, err := telemetry.New(context.Background(), telemetry.Options{SpanExporter: exp})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
			e := newEnv(t, envOpts{tel: tel})
			parent := fmt.Sprintf("00f067aa0ba902b%d", i)
			readAll(t, e.do(t, "POST", c.path, c.body, "x-api-key", vkA, "Authorization", "Bearer "+vkA,
				"content-type", "application/json", "anthropic-version", "2023-06-01",
				"traceparent", "00-"+agentTrace+"-"+parent+"-01", "X-Mock-Turn", `{"kind":"tool"}`))
			id := strings.Split(c.path, "/")[2]
			var rec *trajectory.Record
			waitFor(t, "the turn recorded", func() bool { rec = e.record(t, id); return rec.Turns == 1 })
			if err := tel.ForceFlush(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := exp.GetSpans()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			s := spans[0]
			model := "gpt-4.1"
			if c.provider == "anthropic" {
				model = "claude-sonnet-4-5"
			}
			if s.Name != "chat "+model || s.SpanKind != trace.SpanKindClient {
				t.Errorf("span %q kind %v", s.Name, s.SpanKind)
			}
			if s.Parent.TraceID().String() != agentTrace || s.Parent.SpanID().String() != parent {
				t.Errorf("parent %s/%s, want the agent's", s.Parent.TraceID(), s.Parent.SpanID())
			}
			attrs := map[attribute.Key]attribute.Value{}
			for _, a := range s.Attributes {
				attrs[a.Key] = a.Value
			}
			want := map[attribute.Key]string{
				"gen_ai.operation.name": "chat", "gen_ai.provider.name": c.provider, "gen_ai.request.model": model,
				"gen_ai.response.model":    model,
				"gatekeeper.trajectory.id": id, "gatekeeper.tenant": "team-a",
			}
			for k, v := range want {
				if attrs[k].Emit() != v {
					t.Errorf("%s = %q, want %q", k, attrs[k].Emit(), v)
				}
			}
			input := rec.Spend.InputTokens + rec.Spend.CachedInputTokens + rec.Spend.CacheWriteTokens
			if attrs["gen_ai.usage.input_tokens"].AsInt64() != input || attrs["gen_ai.usage.output_tokens"].AsInt64() != rec.Spend.OutputTokens {
				t.Errorf("usage attributes %v/%v, record %d/%d", attrs["gen_ai.usage.input_tokens"].Emit(),
					attrs["gen_ai.usage.output_tokens"].Emit(), input, rec.Spend.OutputTokens)
			}
			if got := attrs["gen_ai.response.finish_reasons"].AsStringSlice(); len(got) != 1 || got[0] != "tool_use" {
				t.Errorf("finish reasons %v", got)
			}
			var states []string
			for _, ev := range s.Events {
				if ev.Name == "gatekeeper.transition" {
					for _, a := range ev.Attributes {
						if a.Key == "gatekeeper.to" {
							states = append(states, a.Value.AsString())
						}
					}
				}
			}
			if strings.Join(states, ",") != "CALLING_MODEL,WAITING_TOOL" {
				t.Errorf("transition events %v", states)
			}
			up := e.mock.Requests()[0].Header.Get("traceparent")
			if want := "00-" + agentTrace + "-" + s.SpanContext.SpanID().String() + "-01"; up != want {
				t.Errorf("upstream traceparent %q, want %q", up, want)
			}
		})
	}
}

// TestMetricsMatchSpend scrapes the Prometheus handler after a scripted
// run and compares its counters with the records' spend.
func TestMetricsMatchSpend(t *testing.T) {
	tel, err := telemetry.New(context.Background(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	e := newEnv(t, envOpts{tel: tel})
	ids := []string{"m-1", "m-2", "m-3"}
	for i, id := range ids {
		for range i + 1 {
			readAll(t, e.do(t, "POST", "/t/"+id+"/anthropic/v1/messages", anthropicReq(i%2 == 0, "count me"), hdr("X-Mock-Turn", `{"kind":"text"}`)...))
		}
	}
	var dollars float64
	var turns, output int64
	for i, id := range ids {
		var rec *trajectory.Record
		waitFor(t, "the turns recorded", func() bool { rec = e.record(t, id); return rec.Turns == int64(i+1) })
		dollars += rec.Spend.Dollars
		turns += rec.Spend.Turns
		output += rec.Spend.OutputTokens
	}
	srv := httptest.NewServer(tel.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sum := func(name string, match map[string]string) float64 { return scrapeCounter(t, tel, name, match) }
	team := map[string]string{"tenant": "team-a", "model": "claude-sonnet-4-5"}
	if got := sum("gatekeeper_turns_total", team); got != float64(turns) {
		t.Errorf("turns %v, records %d", got, turns)
	}
	if got := sum("gatekeeper_dollars_total", team); fmt.Sprintf("%.6f", got) != fmt.Sprintf("%.6f", dollars) {
		t.Errorf("dollars %v, records %v", got, dollars)
	}
	out := map[string]string{"tenant": "team-a", "type": "output"}
	if got := sum("gatekeeper_tokens_total", out); got != float64(output) {
		t.Errorf("output tokens %v, records %d", got, output)
	}
	if strings.Contains(string(body), "m-1") {
		t.Error("a trajectory id is a label")
	}
}

// spanStore records the trace of every chain update it is asked for.
type spanStore struct {
	trajectory.Store
	mu     sync.Mutex
	traces []trace.TraceID
}

func (s *spanStore) UpdateChain(ctx context.Context, id string, fn func([]*trajectory.Record) ([]trajectory.Event, error)) ([]*trajectory.Record, error) {
	s.mu.Lock()
	s.traces = append(s.traces, trace.SpanContextFromContext(ctx).TraceID())
	s.mu.Unlock()
	return s.Store.UpdateChain(ctx, id, fn)
}

// TestSettleCarriesTheTurnsTrace: the write that records a turn, which
// outlives the agent's request, still runs in the turn's trace (and with
// the request's values), detached from its cancellation only.
func TestSettleCarriesTheTurnsTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tel, err := telemetry.New(context.Background(), telemetry.Options{SpanExporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	st := &spanStore{}
	e := newEnv(t, envOpts{tel: tel, wrap: func(s trajectory.Store) trajectory.Store { st.Store = s; return st }})
	readAll(t, e.do(t, "POST", "/t/span-settle/anthropic/v1/messages", anthropicReq(false, "hello"), "x-api-key", vkA,
		"content-type", "application/json", "anthropic-version", "2023-06-01",
		"traceparent", "00-"+agentTrace+"-00f067aa0ba902b7-01", "X-Mock-Turn", `{"kind":"text"}`))
	waitFor(t, "the turn recorded", func() bool { return e.record(t, "span-settle").Turns == 1 })
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.traces) < 2 {
		t.Fatalf("%d chain updates, want the admission and the settle", len(st.traces))
	}
	if got := st.traces[len(st.traces)-1].String(); got != agentTrace {
		t.Fatalf("the settle's update ran in trace %q, want the turn's %s (all: %v)", got, agentTrace, st.traces)
	}
}
