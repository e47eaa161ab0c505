// Package telemetry owns gatekeeper's OpenTelemetry signals: one CLIENT span
// per model call, named and attributed per the OpenTelemetry GenAI semantic
// conventions and exported over OTLP/HTTP when tracing is on, and the
// process's metrics, served in the Prometheus text format from a registry of
// its own.
//
// The W3C trace context an agent sends is honored: a turn's span is its
// child, and the span's own context goes upstream. Metric labels are bounded:
// no trajectory id is ever a label, and free-form values such as model names
// fold into "other" past a fixed number of distinct values.
//
// A nil *Telemetry and a nil *Turn are valid and do nothing, so callers need
// no checks when telemetry is not set up.
package telemetry
