package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"gatekeeper/config"
)

// clock is a manual clock: tests move it instead of sleeping.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newClock() *clock { return &clock{t: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)} }

func defaultTelemetryConfig() config.Telemetry { return config.DefaultConfig().Telemetry }

// newTraced returns a Telemetry exporting spans to memory.
func newTraced(t *testing.T, c *clock) (*Telemetry, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tel, err := New(t.Context(), Options{Config: defaultTelemetryConfig(), Version: "1.2.3", SpanExporter: exp, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tel.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return tel, exp
}

// spans flushes the batcher and returns what reached the exporter.
func spans(t *testing.T, tel *Telemetry, exp *tracetest.InMemoryExporter) tracetest.SpanStubs {
	t.Helper()
	if err := tel.tp.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	return exp.GetSpans()
}

func attrMap(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

const (
	agentTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	agentSpanID  = "00f067aa0ba902b7"
	agentParent  = "00-" + agentTraceID + "-" + agentSpanID + "-01"
)

var sonnetStart = TurnStart{
	Provider: "anthropic-eu", ProviderName: "anthropic", API: "messages", Model: "claude-sonnet-4-5",
	Trajectory: "run-42/child-1", Parent: "run-42", Tenant: "team-a", Stage: "steer", ServerAddress: "api.anthropic.com",
}

func TestTurnSpan(t *testing.T) {
	c := newClock()
	tel, exp := newTraced(t, c)
	agent := http.Header{}
	agent.Set("traceparent", agentParent)
	agent.Set("tracestate", "vendor=abc")

	ctx, turn := tel.StartTurn(t.Context(), agent, sonnetStart)
	if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		t.Error("the returned context carries no span")
	}
	up := http.Header{}
	turn.Inject(up)
	c.advance(300 * time.Millisecond)
	turn.FirstByte()
	turn.Event("gatekeeper.state", attribute.String("from", "CALLING_MODEL"), attribute.String("to", "WAITING_TOOL"))
	c.advance(2 * time.Second)
	turn.End(TurnEnd{
		ResponseModel: "claude-sonnet-4-5-20250929", FinishReasons: []string{"tool_use"}, Stop: "tool_use",
		InputTokens: 10, CachedInputTokens: 1000, CacheWriteTokens: 200, OutputTokens: 55,
		Dollars: 0.0123, Status: 200, ApprovalID: "apr-7",
	})

	got := spans(t, tel, exp)
	if len(got) != 1 {
		t.Fatalf("got %d spans, want 1", len(got))
	}
	s := got[0]
	if s.Name != "chat claude-sonnet-4-5" {
		t.Errorf("name %q, want %q", s.Name, "chat claude-sonnet-4-5")
	}
	if s.SpanKind != trace.SpanKindClient {
		t.Errorf("kind %v, want client", s.SpanKind)
	}
	if s.Parent.TraceID().String() != agentTraceID || s.Parent.SpanID().String() != agentSpanID || !s.Parent.IsRemote() {
		t.Errorf("parent %v, want the agent's remote span %s", s.Parent, agentSpanID)
	}
	if s.SpanContext.TraceID().String() != agentTraceID {
		t.Errorf("trace id %s, want the agent's %s", s.SpanContext.TraceID(), agentTraceID)
	}
	wantParent := "00-" + agentTraceID + "-" + s.SpanContext.SpanID().String() + "-01"
	if got := up.Get("traceparent"); got != wantParent {
		t.Errorf("upstream traceparent %q, want %q", got, wantParent)
	}
	if got := up.Get("tracestate"); got != "vendor=abc" {
		t.Errorf("upstream tracestate %q, want the agent's", got)
	}
	if d := s.EndTime.Sub(s.StartTime); d != 2300*time.Millisecond {
		t.Errorf("span lasted %v, want 2.3s of the clock", d)
	}
	if s.Status.Code != codes.Unset {
		t.Errorf("status %v, want unset", s.Status)
	}

	attrs := attrMap(s.Attributes)
	want := map[attribute.Key]attribute.Value{
		"gen_ai.operation.name":                    attribute.StringValue("chat"),
		"gen_ai.provider.name":                     attribute.StringValue("anthropic"),
		"gen_ai.request.model":                     attribute.StringValue("claude-sonnet-4-5"),
		"gen_ai.response.model":                    attribute.StringValue("claude-sonnet-4-5-20250929"),
		"gen_ai.response.finish_reasons":           attribute.StringSliceValue([]string{"tool_use"}),
		"gen_ai.usage.input_tokens":                attribute.Int64Value(1210),
		"gen_ai.usage.output_tokens":               attribute.Int64Value(55),
		"gen_ai.usage.cache_read.input_tokens":     attribute.Int64Value(1000),
		"gen_ai.usage.cache_creation.input_tokens": attribute.Int64Value(200),
		"server.address":                           attribute.StringValue("api.anthropic.com"),
		"http.response.status_code":                attribute.Int64Value(200),
		"gatekeeper.trajectory.id":                 attribute.StringValue("run-42/child-1"),
		"gatekeeper.trajectory.parent_id":          attribute.StringValue("run-42"),
		"gatekeeper.tenant":                        attribute.StringValue("team-a"),
		"gatekeeper.api":                           attribute.StringValue("messages"),
		"gatekeeper.stage":                         attribute.StringValue("steer"),
		"gatekeeper.stop":                          attribute.StringValue("tool_use"),
		"gatekeeper.cost.dollars":                  attribute.Float64Value(0.0123),
		"gatekeeper.cost.estimated":                attribute.BoolValue(false),
		"gatekeeper.approval.id":                   attribute.StringValue("apr-7"),
	}
	for k, v := range want {
		if got, ok := attrs[k]; !ok || got.Emit() != v.Emit() {
			t.Errorf("%s = %v (present %v), want %v", k, got.Emit(), ok, v.Emit())
		}
	}
	if _, ok := attrs["error.type"]; ok {
		t.Error("error.type set on a call that did not fail")
	}

	if len(s.Events) != 2 {
		t.Fatalf("events %+v, want first byte and the state change", s.Events)
	}
	if e := s.Events[0]; e.Name != "gatekeeper.first_byte" || !e.Time.Equal(s.StartTime.Add(300*time.Millisecond)) {
		t.Errorf("first event %+v", e)
	}
	if e := s.Events[1]; e.Name != "gatekeeper.state" || attrMap(e.Attributes)["to"].AsString() != "WAITING_TOOL" {
		t.Errorf("second event %+v", e)
	}
	if s.Resource.Set().Len() == 0 {
		t.Fatal("no resource")
	}
	if v, _ := s.Resource.Set().Value("service.name"); v.AsString() != "gatekeeper" {
		t.Errorf("service.name %q", v.AsString())
	}
	if v, _ := s.Resource.Set().Value("service.version"); v.AsString() != "1.2.3" {
		t.Errorf("service.version %q", v.AsString())
	}
}

func TestTurnWithoutAgentContextStartsATrace(t *testing.T) {
	tel, exp := newTraced(t, newClock())
	_, turn := tel.StartTurn(t.Context(), nil, TurnStart{ProviderName: "openai", Model: ""})
	up := http.Header{}
	turn.Inject(up)
	turn.End(TurnEnd{})
	got := spans(t, tel, exp)
	if len(got) != 1 {
		t.Fatalf("got %d spans", len(got))
	}
	if got[0].Parent.IsValid() {
		t.Errorf("parent %v, want a root span", got[0].Parent)
	}
	if got[0].Name != "chat" {
		t.Errorf("name %q, want %q without a model", got[0].Name, "chat")
	}
	if up.Get("traceparent") == "" {
		t.Error("no traceparent upstream")
	}
}

func TestTurnErrorStatus(t *testing.T) {
	tests := []struct {
		name      string
		errType   string
		wantCode  codes.Code
		wantError bool
	}{
		{"failed call", "rate_limited", codes.Error, true},
		{"successful call", "", codes.Unset, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tel, exp := newTraced(t, newClock())
			_, turn := tel.StartTurn(t.Context(), nil, sonnetStart)
			turn.End(TurnEnd{Status: 429, ErrorType: tc.errType})
			got := spans(t, tel, exp)
			if len(got) != 1 {
				t.Fatalf("got %d spans", len(got))
			}
			if got[0].Status.Code != tc.wantCode {
				t.Errorf("status %v, want %v", got[0].Status.Code, tc.wantCode)
			}
			v, ok := attrMap(got[0].Attributes)["error.type"]
			if ok != tc.wantError || (ok && v.AsString() != tc.errType) {
				t.Errorf("error.type = %q (present %v)", v.AsString(), ok)
			}
		})
	}
}

func TestEndOnce(t *testing.T) {
	tel, exp := newTraced(t, newClock())
	_, turn := tel.StartTurn(t.Context(), nil, sonnetStart)
	turn.End(TurnEnd{OutputTokens: 5})
	turn.End(TurnEnd{OutputTokens: 7})
	turn.Event("late")
	if got := spans(t, tel, exp); len(got) != 1 || len(got[0].Events) != 0 {
		t.Fatalf("got %d spans (%+v), want one without the late event", len(got), got)
	}
}

func TestTracingOffForwardsAgentContext(t *testing.T) {
	tel, err := New(t.Context(), Options{Config: defaultTelemetryConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	if tel.tracing {
		t.Fatal("tracing on by default")
	}
	agent := http.Header{"Traceparent": {agentParent}}
	_, turn := tel.StartTurn(t.Context(), agent, sonnetStart)
	up := http.Header{}
	turn.Inject(up)
	turn.FirstByte()
	turn.End(TurnEnd{})
	if got := up.Get("traceparent"); got != agentParent {
		t.Errorf("upstream traceparent %q, want the agent's %q", got, agentParent)
	}

	_, turn = tel.StartTurn(t.Context(), http.Header{}, sonnetStart)
	up = http.Header{}
	turn.Inject(up)
	turn.End(TurnEnd{})
	if len(up) != 0 {
		t.Errorf("headers %v written without any trace", up)
	}
}

func TestSampleRatioZeroKeepsAgentDecision(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	cfg := defaultTelemetryConfig()
	cfg.Traces.SampleRatio = 0
	tel, err := New(t.Context(), Options{Config: cfg, SpanExporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	_, turn := tel.StartTurn(t.Context(), nil, sonnetStart)
	turn.End(TurnEnd{})
	_, turn = tel.StartTurn(t.Context(), http.Header{"Traceparent": {agentParent}}, sonnetStart)
	turn.End(TurnEnd{})
	got := spans(t, tel, exp)
	if len(got) != 1 || got[0].Parent.SpanID().String() != agentSpanID {
		t.Errorf("got %d spans, want only the one the agent sampled", len(got))
	}
}

func TestNilReceivers(t *testing.T) {
	var tel *Telemetry
	ctx, turn := tel.StartTurn(t.Context(), http.Header{"Traceparent": {agentParent}}, sonnetStart)
	if turn != nil || ctx != t.Context() {
		t.Errorf("nil Telemetry: got turn %v and a new context", turn)
	}
	h := http.Header{}
	turn.Inject(h)
	turn.FirstByte()
	turn.Event("x")
	turn.End(TurnEnd{ErrorType: "x"})
	if len(h) != 0 {
		t.Errorf("nil Turn wrote %v", h)
	}
	tel.StageChanged("a", "nominal", "steer")
	tel.StateChanged("a", "", "READY")
	tel.UpstreamError("p", "timeout")
	tel.ApprovalPending(1)
	tel.ApprovalDecided("g", "approved", time.Second)
	tel.QueueWait("batch", time.Second)
	if err := tel.Shutdown(t.Context()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	rec := httptest.NewRecorder()
	tel.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("nil Handler: %d, want 404", rec.Code)
	}
}

func TestTracingSwitch(t *testing.T) {
	tests := []struct {
		name    string
		traces  config.Traces
		env     map[string]string
		tracing bool
	}{
		{"off by default", config.Traces{SampleRatio: 1}, nil, false},
		{"on in config", config.Traces{Enabled: true, SampleRatio: 1}, nil, true},
		{"on in config with an endpoint", config.Traces{Enabled: true, OTLPEndpoint: "http://127.0.0.1:1/v1/traces", SampleRatio: 1}, nil, true},
		{"on by the endpoint variable", config.Traces{SampleRatio: 1}, map[string]string{envOTLPEndpoint: "http://127.0.0.1:1"}, true},
		{"on by the traces endpoint variable", config.Traces{SampleRatio: 1}, map[string]string{envOTLPTracesEndpoint: "http://127.0.0.1:1/v1/traces"}, true},
		{"off by OTEL_SDK_DISABLED", config.Traces{Enabled: true, SampleRatio: 1}, map[string]string{envSDKDisabled: "true", envOTLPEndpoint: "http://127.0.0.1:1"}, false},
		{"OTEL_SDK_DISABLED=false changes nothing", config.Traces{Enabled: true, SampleRatio: 1}, map[string]string{envSDKDisabled: "false"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultTelemetryConfig()
			cfg.Traces = tc.traces
			tel, err := New(t.Context(), Options{Config: cfg, Getenv: func(k string) string { return tc.env[k] }})
			if err != nil {
				t.Fatal(err)
			}
			if tel.tracing != tc.tracing || (tel.tp != nil) != tc.tracing {
				t.Errorf("tracing %v, want %v", tel.tracing, tc.tracing)
			}
			// No span was started, so nothing is exported and nothing dialed.
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if err := tel.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		})
	}
}

func TestExporterOverridesSwitch(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tel, err := New(t.Context(), Options{
		Config:       defaultTelemetryConfig(),
		Getenv:       func(k string) string { return map[string]string{envSDKDisabled: "true"}[k] },
		SpanExporter: exp,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	if !tel.tracing {
		t.Error("an explicit exporter did not turn tracing on")
	}
}

// TestSpanNameKeepsTheModel: the span is named for the model the request
// named, also past the bound of the model label (whose value is then
// "other"), and a series' name made once is the same as one made per
// turn.
func TestSpanNameKeepsTheModel(t *testing.T) {
	c := newClock()
	tel, exp := newTraced(t, c)
	var want []string
	for i := range maxLabelValues + 2 {
		s := sonnetStart
		s.Model = fmt.Sprintf("model-%d", i)
		for range 2 { // the second turn of a model finds its series made
			_, turn := tel.StartTurn(t.Context(), nil, s)
			turn.End(TurnEnd{Stop: "end_turn"})
			want = append(want, "chat "+s.Model)
		}
	}
	got := spans(t, tel, exp)
	if len(got) != len(want) {
		t.Fatalf("%d spans, want %d", len(got), len(want))
	}
	for i, s := range got {
		if s.Name != want[i] {
			t.Errorf("span %d named %q, want %q", i, s.Name, want[i])
		}
	}
}
