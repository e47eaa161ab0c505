package telemetry

import (
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// maxCachedSeries bounds the cache of a turn's precomputed label sets; past
// it, sets are built per call, which is only slower.
const maxCachedSeries = 4096

// seriesKey is what a turn's metric labels depend on, all values already
// bounded.
type seriesKey struct {
	tenant, provider, model, providerName, server string
}

// series holds the label sets of one seriesKey, built once: building an
// attribute set (sort, dedup, hash) is most of what recording costs.
type series struct {
	base      metric.MeasurementOption // tenant, provider, model
	tokens    [4]metric.MeasurementOption
	genAI     []attribute.KeyValue
	operation metric.MeasurementOption // gen_ai.* without error.type
	usageIn   metric.MeasurementOption
	usageOut  metric.MeasurementOption
	stops     sync.Map // stop reason -> metric.MeasurementOption
}

// seriesCache maps seriesKey to *series.
type seriesCache struct {
	m sync.Map
	n atomic.Int64
}

func (c *seriesCache) get(k seriesKey) *series {
	if s, ok := c.m.Load(k); ok {
		return s.(*series)
	}
	s := newSeries(k)
	if c.n.Load() >= maxCachedSeries {
		return s
	}
	actual, loaded := c.m.LoadOrStore(k, s)
	if !loaded {
		c.n.Add(1)
	}
	return actual.(*series)
}

var tokenTypes = [4]string{tokenInput, tokenCached, tokenCacheWrite, tokenOutput}

func newSeries(k seriesKey) *series {
	tenant, provider, model := labelTenant.String(k.tenant), labelProvider.String(k.provider), labelModel.String(k.model)
	s := &series{base: metric.WithAttributeSet(attribute.NewSet(tenant, provider, model))}
	for i, typ := range tokenTypes {
		s.tokens[i] = metric.WithAttributeSet(attribute.NewSet(tenant, provider, model, labelType.String(typ)))
	}
	s.genAI = []attribute.KeyValue{
		keyOperationName.String(operationChat),
		keyProviderName.String(k.providerName),
		keyRequestModel.String(k.model),
		keyServerAddress.String(k.server),
	}
	s.operation = metric.WithAttributeSet(attribute.NewSet(s.genAI...))
	s.usageIn = metric.WithAttributeSet(attribute.NewSet(append(s.genAI[:4:4], keyTokenType.String(tokenInput))...))
	s.usageOut = metric.WithAttributeSet(attribute.NewSet(append(s.genAI[:4:4], keyTokenType.String(tokenOutput))...))
	return s
}

// stop returns the label set of gatekeeper_turns_total for a stop reason
// (already bounded, so the map is too).
func (s *series) stop(k seriesKey, stop string) metric.MeasurementOption {
	if o, ok := s.stops.Load(stop); ok {
		return o.(metric.MeasurementOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(
		labelTenant.String(k.tenant), labelProvider.String(k.provider), labelModel.String(k.model), labelStop.String(stop)))
	s.stops.Store(stop, o)
	return o
}
