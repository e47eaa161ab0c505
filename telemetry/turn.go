package telemetry

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TurnStart describes a model call as it starts.
type TurnStart struct {
	Provider     string // the configured provider's name, e.g. "anthropic-eu"
	ProviderName string // gen_ai.provider.name: "anthropic" or "openai"
	API          string // which of the APIs: messages, chat completions, responses
	Model        string // the model the request asks for
	Trajectory   string
	Parent       string // the parent trajectory's id, if any
	Tenant       string
	Stage        string // budget stage when the call starts
	// Person labels the person whose token admitted the call (their email,
	// else name, else subject) and Group the group that admitted them
	// (config.Identity.GroupOf); both "" for a virtual key, whose series
	// carry neither label.
	Person, Group string
	// ServerAddress is the upstream host, server.address.
	ServerAddress string
}

// TurnEnd is what a finished model call came to.
type TurnEnd struct {
	ResponseModel string
	FinishReasons []string
	Stop          string // the stop reason, as the provider said it
	// gen_ai.usage.input_tokens is the sum of the three input counts.
	InputTokens, CachedInputTokens, CacheWriteTokens, OutputTokens int64
	Dollars                                                        float64
	Estimated                                                      bool // the price was a fallback or the usage was counted locally
	Status                                                         int  // HTTP status of the reply to the agent
	// ErrorType classifies a failed call ("" when it did not fail); it sets
	// the span's status to Error and error.type.
	ErrorType  string
	ApprovalID string
}

// Turn is one model call in flight. Its methods are safe for concurrent use
// and a nil *Turn does nothing.
type Turn struct {
	t     *Telemetry
	span  trace.Span
	start time.Time

	// Bounded label values, fixed at the start, and their label sets.
	key    seriesKey
	series *series

	firstByte atomic.Bool
	ended     atomic.Bool
}

// StartTurn begins the span of one model call, a CLIENT span named
// "chat {model}", child of the W3C trace context in the agent's headers
// (traceparent, tracestate) when there is one. The returned context carries
// the span. With tracing off the agent's context still passes through, so
// Inject forwards it upstream unchanged.
func (t *Telemetry) StartTurn(ctx context.Context, agentHeaders http.Header, s TurnStart) (context.Context, *Turn) {
	if t == nil {
		return ctx, nil
	}
	if agentHeaders != nil {
		ctx = t.propagator.Extract(ctx, propagation.HeaderCarrier(agentHeaders))
	}
	start := t.now()
	m := t.m
	tenant := m.tenants.value(s.Tenant)
	key := seriesKey{
		tenant:       tenant,
		provider:     m.providers.value(s.Provider),
		model:        m.models.value(tenant, s.Model),
		providerName: m.providers.value(s.ProviderName),
		server:       m.servers.value(s.ServerAddress),
	}
	if s.Person != "" {
		key.group = m.groups.value(s.Group)
		if m.people != nil {
			key.person = m.people.value(s.Person)
		}
	}
	series := m.series.get(key)
	name := series.spanName // the model's, made once, unless its label is another
	if key.model != s.Model {
		name = spanName(s.Model)
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start)}
	if t.tracing {
		opts = append(opts, trace.WithAttributes(
			keyOperationName.String(operationChat),
			keyProviderName.String(s.ProviderName),
			keyRequestModel.String(s.Model),
			keyServerAddress.String(s.ServerAddress),
			keyTrajectory.String(s.Trajectory),
			keyParent.String(s.Parent),
			keyTenant.String(s.Tenant),
			keyAPI.String(s.API),
			keyStage.String(s.Stage),
		))
	}
	ctx, span := t.tracer.Start(ctx, name, opts...)
	return ctx, &Turn{t: t, span: span, start: start, key: key, series: series}
}

// spanName is a turn's span name: "chat {model}", or "chat" without one.
func spanName(model string) string {
	if model == "" {
		return operationChat
	}
	return operationChat + " " + model
}

// Inject writes the turn's trace context (its span's traceparent, with the
// agent's tracestate) into the headers of the upstream request.
func (tt *Turn) Inject(h http.Header) {
	if tt == nil || h == nil {
		return
	}
	ctx := trace.ContextWithSpan(context.Background(), tt.span)
	tt.t.propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// FirstByte marks the first byte of the reply; only the first call counts.
func (tt *Turn) FirstByte() {
	if tt == nil || !tt.firstByte.CompareAndSwap(false, true) {
		return
	}
	now := tt.t.now()
	tt.t.m.ttft.Record(context.Background(), now.Sub(tt.start).Seconds(), tt.series.base.rec...)
	if tt.span.IsRecording() {
		tt.span.AddEvent("gatekeeper.first_byte", trace.WithTimestamp(now))
	}
}

// Recording reports whether the turn's span records what it is given: a
// caller that builds a span event's attributes asks first, so that an
// unsampled turn builds none.
func (tt *Turn) Recording() bool { return tt != nil && tt.span.IsRecording() }

// Event adds a span event, e.g. a state transition of the trajectory.
func (tt *Turn) Event(name string, attrs ...attribute.KeyValue) {
	if !tt.Recording() {
		return
	}
	tt.span.AddEvent(name, trace.WithTimestamp(tt.t.now()), trace.WithAttributes(attrs...))
}

// End ends the span and records the turn's metrics; calls after the first
// do nothing.
func (tt *Turn) End(e TurnEnd) {
	if tt == nil || !tt.ended.CompareAndSwap(false, true) {
		return
	}
	now := tt.t.now()
	input := e.InputTokens + e.CachedInputTokens + e.CacheWriteTokens
	if tt.span.IsRecording() {
		tt.span.SetAttributes(
			keyInputTokens.Int64(input),
			keyOutputTokens.Int64(e.OutputTokens),
			keyCacheReadTokens.Int64(e.CachedInputTokens),
			keyCacheWriteTokens.Int64(e.CacheWriteTokens),
			keyDollars.Float64(e.Dollars),
			keyEstimated.Bool(e.Estimated),
		)
		if e.ResponseModel != "" {
			tt.span.SetAttributes(keyResponseModel.String(e.ResponseModel))
		}
		if len(e.FinishReasons) > 0 {
			tt.span.SetAttributes(keyFinishReasons.StringSlice(e.FinishReasons))
		}
		if e.Stop != "" {
			tt.span.SetAttributes(keyStop.String(e.Stop))
		}
		if e.Status != 0 {
			tt.span.SetAttributes(keyHTTPStatus.Int(e.Status))
		}
		if e.ApprovalID != "" {
			tt.span.SetAttributes(keyApprovalID.String(e.ApprovalID))
		}
		if e.ErrorType != "" {
			tt.span.SetAttributes(keyErrorType.String(e.ErrorType))
			tt.span.SetStatus(codes.Error, e.ErrorType)
		}
	}
	tt.span.End(trace.WithTimestamp(now))
	tt.record(e, input, now.Sub(tt.start))
}

// record adds the finished turn to the metrics.
func (tt *Turn) record(e TurnEnd, input int64, d time.Duration) {
	ctx := context.Background()
	m, s := tt.t.m, tt.series

	m.turns.Add(ctx, 1, s.stop(tt.key, m.stops.value(tt.key.tenant, e.Stop)).add...)
	for i, n := range [4]int64{e.InputTokens, e.CachedInputTokens, e.CacheWriteTokens, e.OutputTokens} {
		if n > 0 {
			m.tokens.Add(ctx, n, s.tokens[i].add...)
		}
	}
	if e.Dollars > 0 {
		m.dollars.Add(ctx, e.Dollars, s.cost.add...)
	}
	m.turnDuration.Record(ctx, d.Seconds(), s.base.rec...)

	if e.ErrorType == "" {
		m.operation.Record(ctx, d.Seconds(), s.operation.rec...)
	} else {
		m.operation.Record(ctx, d.Seconds(), metric.WithAttributes(
			append(s.genAI[:len(s.genAI):len(s.genAI)], keyErrorType.String(m.errTypes.value(e.ErrorType)))...))
	}
	// A failed call reports the tokens it used, when the provider said.
	if input > 0 || e.OutputTokens > 0 {
		m.tokenUsage.Record(ctx, input, s.usageIn.rec...)
		m.tokenUsage.Record(ctx, e.OutputTokens, s.usageOut.rec...)
	}
}
