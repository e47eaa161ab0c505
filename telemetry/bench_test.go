package telemetry

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkTurnTelemetry is the cost a model call pays for telemetry:
// StartTurn (with the agent's traceparent), Inject, FirstByte and End, with
// tracing on (in-memory exporter behind the batcher) and off (metrics only).
func BenchmarkTurnTelemetry(b *testing.B) {
	for _, bc := range []struct {
		name    string
		tracing bool
	}{{"tracing=off", false}, {"tracing=on", true}} {
		b.Run(bc.name, func(b *testing.B) {
			o := Options{Config: defaultTelemetryConfig()}
			exp := tracetest.NewInMemoryExporter()
			if bc.tracing {
				o.SpanExporter = exp
			}
			tel, err := New(context.Background(), o)
			if err != nil {
				b.Fatal(err)
			}
			defer tel.Shutdown(context.Background())
			agent := http.Header{"Traceparent": {agentParent}}
			end := TurnEnd{ResponseModel: "claude-sonnet-4-5-20250929", FinishReasons: []string{"end_turn"}, Stop: "end_turn",
				InputTokens: 10, CachedInputTokens: 1000, CacheWriteTokens: 20, OutputTokens: 300, Dollars: 0.01, Status: 200}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_, turn := tel.StartTurn(ctx, agent, sonnetStart)
				up := make(http.Header, 1)
				turn.Inject(up)
				turn.FirstByte()
				turn.End(end)
				// Keep the exporter's memory flat over long runs.
				if i++; i%4096 == 0 {
					exp.Reset()
				}
			}
		})
	}
}
