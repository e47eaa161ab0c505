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
// bounded. person and group are "" for a virtual key's turn, whose series
// carry no such labels.
type seriesKey struct {
	tenant, provider, model, providerName, server string
	person, group                                 string
}

// who are the person and group labels of k, those it has: none for a
// virtual key's turn.
func (k seriesKey) who() []attribute.KeyValue {
	var kvs []attribute.KeyValue
	if k.person != "" {
		kvs = append(kvs, labelPerson.String(k.person))
	}
	if k.group != "" {
		kvs = append(kvs, labelGroup.String(k.group))
	}
	return kvs
}

// labels is one label set as the option lists the instruments take,
// made once: a list passed on as it is allocates nothing, where each
// option written at the call is a new list per call.
type labels struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func newLabels(kvs ...attribute.KeyValue) labels {
	o := metric.WithAttributeSet(attribute.NewSet(kvs...))
	return labels{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
}

// series holds the label sets of one seriesKey, built once: building an
// attribute set (sort, dedup, hash) is most of what recording costs.
type series struct {
	base      labels // tenant, provider, model
	cost      labels // base with the person and group: the dollars'
	tokens    [4]labels
	genAI     []attribute.KeyValue
	operation labels // gen_ai.* without error.type
	usageIn   labels
	usageOut  labels
	stops     sync.Map // stop reason -> labels
	spanName  string   // a turn's span name for the series' model
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
	// The person and group go on the counters a cost report sums (turns,
	// tokens, dollars), not on the histograms, whose buckets would
	// multiply them.
	who := k.who()
	s := &series{base: newLabels(tenant, provider, model), spanName: spanName(k.model)}
	s.cost = s.base
	if len(who) > 0 {
		s.cost = newLabels(append([]attribute.KeyValue{tenant, provider, model}, who...)...)
	}
	for i, typ := range tokenTypes {
		s.tokens[i] = newLabels(append([]attribute.KeyValue{tenant, provider, model, labelType.String(typ)}, who...)...)
	}
	s.genAI = []attribute.KeyValue{
		keyOperationName.String(operationChat),
		keyProviderName.String(k.providerName),
		keyRequestModel.String(k.model),
		keyServerAddress.String(k.server),
	}
	s.operation = newLabels(s.genAI...)
	s.usageIn = newLabels(append(s.genAI[:4:4], keyTokenType.String(tokenInput))...)
	s.usageOut = newLabels(append(s.genAI[:4:4], keyTokenType.String(tokenOutput))...)
	return s
}

// stop returns the label set of gatekeeper_turns_total for a stop reason
// (already bounded, so the map is too).
func (s *series) stop(k seriesKey, stop string) labels {
	if o, ok := s.stops.Load(stop); ok {
		return o.(labels)
	}
	o := newLabels(append([]attribute.KeyValue{labelTenant.String(k.tenant), labelProvider.String(k.provider),
		labelModel.String(k.model), labelStop.String(stop)}, k.who()...)...)
	s.stops.Store(stop, o)
	return o
}

// labelCache keeps the label sets of a metric outside a turn's series by
// their bounded values, built on first use, at most maxCachedSeries of
// them (past it, sets are built per call, which is only slower).
type labelCache[K comparable] struct {
	m sync.Map // K -> labels
	n atomic.Int64
}

func (c *labelCache[K]) get(k K, kvs func() []attribute.KeyValue) labels {
	if l, ok := c.m.Load(k); ok {
		return l.(labels)
	}
	l := newLabels(kvs()...)
	if c.n.Load() >= maxCachedSeries {
		return l
	}
	if _, loaded := c.m.LoadOrStore(k, l); !loaded {
		c.n.Add(1)
	}
	return l
}
