package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"gatekeeper/config"
)

// instrumentationName names the tracer and the meter.
const instrumentationName = "gatekeeper"

// The standard variables New reads through Options.Getenv.
const (
	envSDKDisabled        = "OTEL_SDK_DISABLED"
	envOTLPEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envOTLPTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	otlpTracesPath        = "/v1/traces"
)

// Options are what New needs.
type Options struct {
	Config config.Telemetry // from config.yaml
	// Getenv reads OTEL_EXPORTER_OTLP_* and OTEL_SDK_DISABLED; os.Getenv in
	// main, nil meaning no variable is set.
	Getenv  func(string) string
	Version string // service.version
	// SpanExporter, when set, receives the spans instead of OTLP and turns
	// tracing on whatever the config and variables say (tests pass
	// tracetest.NewInMemoryExporter()).
	SpanExporter sdktrace.SpanExporter
	// Now is the clock of turn durations and span times; nil means time.Now.
	Now func() time.Time
}

// Telemetry is one process's tracer and meters. Its methods are safe for
// concurrent use; a nil *Telemetry does nothing.
type Telemetry struct {
	now        func() time.Time
	tracing    bool                     // spans are recorded and exported
	tp         *sdktrace.TracerProvider // nil when tracing is off
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	mp         *sdkmetric.MeterProvider
	registry   *prometheus.Registry
	handler    http.Handler
	m          *instruments
	rates      RateObserver // nil: none; set before serving (TeeRateLimits)
}

// New sets up metrics, always, and tracing when it is on. It never dials:
// the OTLP exporter connects on its first export.
func New(ctx context.Context, o Options) (*Telemetry, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	name := o.Config.ServiceName
	if name == "" {
		name = config.DefaultServiceName
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(name)}
	if o.Version != "" {
		attrs = append(attrs, semconv.ServiceVersion(o.Version))
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, attrs...)

	t := &Telemetry{
		now:        now,
		propagator: propagation.TraceContext{},
		registry:   prometheus.NewRegistry(),
	}
	exp, err := otelprom.New(
		otelprom.WithRegisterer(t.registry),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	// The standard Go runtime and process collectors (go_*, process_*):
	// heap, allocations, GC, goroutines, CPU, resident memory, descriptors.
	if err := registerRuntime(t.registry); err != nil {
		return nil, err
	}
	t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	t.handler = promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{})
	if tok := o.Config.MetricsToken; tok != "" {
		t.handler = requireBearer(tok, t.handler)
	}
	if t.m, err = newInstruments(t.mp.Meter(instrumentationName), o.Config.MetricsPeople); err != nil {
		return nil, errors.Join(err, t.mp.Shutdown(ctx))
	}

	spans := o.SpanExporter
	if spans == nil && tracingOn(o.Config.Traces, getenv) {
		if spans, err = otlpExporter(ctx, o.Config.Traces, getenv); err != nil {
			return nil, errors.Join(err, t.mp.Shutdown(ctx))
		}
	}
	if spans == nil {
		t.tracer = noop.NewTracerProvider().Tracer(instrumentationName)
		return t, nil
	}
	t.tracing = true
	t.tp = sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(spans),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.Config.Traces.SampleRatio))),
	)
	t.tracer = t.tp.Tracer(instrumentationName,
		trace.WithInstrumentationVersion(o.Version), trace.WithSchemaURL(semconv.SchemaURL))
	return t, nil
}

// registerRuntime adds the collectors every Go service exports: the Go
// runtime's (go_memstats_*, go_gc_*, go_goroutines, ...; read through
// runtime/metrics, without stopping the world) and the process's
// (process_cpu_seconds_total, process_resident_memory_bytes, ...).
func registerRuntime(r *prometheus.Registry) error {
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("telemetry: runtime collectors: %w", err)
		}
	}
	return nil
}

// tracingOn follows the config, then the standard variables: an endpoint
// variable turns tracing on, OTEL_SDK_DISABLED=true turns it off in any case.
func tracingOn(c config.Traces, getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv(envSDKDisabled)), "true") {
		return false
	}
	return c.Enabled || getenv(envOTLPEndpoint) != "" || getenv(envOTLPTracesEndpoint) != ""
}

// otlpExporter builds the OTLP/HTTP exporter. The endpoint is resolved here,
// through getenv, rather than left to the exporter's own reading of the
// process environment, so the config file wins and tests stay hermetic;
// the exporter still reads the other OTEL_EXPORTER_OTLP_* settings (headers,
// TLS, timeouts) itself.
func otlpExporter(ctx context.Context, c config.Traces, getenv func(string) string) (sdktrace.SpanExporter, error) {
	endpoint := c.OTLPEndpoint
	if endpoint == "" {
		if v := getenv(envOTLPTracesEndpoint); v != "" {
			endpoint = v
		} else if v := getenv(envOTLPEndpoint); v != "" {
			endpoint = strings.TrimRight(v, "/") + otlpTracesPath
		}
	}
	var opts []otlptracehttp.Option
	if endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
	}
	return exp, nil
}

// Handler serves this process's metrics in the Prometheus text format, from
// the registry of this Telemetry, never the global one; only to a request
// bearing telemetry.metrics_token when it is set.
func (t *Telemetry) Handler() http.Handler {
	if t == nil {
		return http.NotFoundHandler()
	}
	return t.handler
}

// ForceFlush exports the spans ended so far, without stopping anything.
func (t *Telemetry) ForceFlush(ctx context.Context) error {
	if t == nil || t.tp == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// Shutdown flushes the spans not yet exported and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	if t.tp != nil {
		if err := t.tp.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("telemetry: tracer shutdown: %w", err))
		}
	}
	if err := t.mp.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("telemetry: meter shutdown: %w", err))
	}
	return errors.Join(errs...)
}
