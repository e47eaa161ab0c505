package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// labelKey names a provider key as "provider/keyname", never the secret.
const labelKey = attribute.Key("key")

// RateObserver also hears the queue lengths and key headroom telemetry
// records: the live event stream's keys view.
type RateObserver interface {
	QueueLength(class string, n int)
	Headroom(key string, fraction float64)
}

// TeeRateLimits passes every queue length and headroom recorded from now
// on to o as well. It must be called before the scheduler runs.
func (t *Telemetry) TeeRateLimits(o RateObserver) {
	if t != nil {
		t.rates = o
	}
}

// QueueLength sets how many requests of a priority class wait for
// rate-limit capacity. With QueueWait and Headroom it makes a Telemetry
// the rate-limit scheduler's observer.
func (t *Telemetry) QueueLength(class string, n int) {
	if t == nil {
		return
	}
	if t.rates != nil {
		t.rates.QueueLength(class, n)
	}
	m := t.m
	m.queueLength.Record(context.Background(), int64(n), metric.WithAttributes(labelClass.String(m.classes.value(class))))
}

// Headroom sets the share of a provider key's tightest limit left; key is
// "provider/keyname".
func (t *Telemetry) Headroom(key string, fraction float64) {
	if t == nil {
		return
	}
	if t.rates != nil {
		t.rates.Headroom(key, fraction)
	}
	m := t.m
	key = m.keys.value(key)
	l := m.headroomSets.get(key, func() []attribute.KeyValue { return []attribute.KeyValue{labelKey.String(key)} })
	m.headroom.Record(context.Background(), fraction, l.rec...)
}

// KeyRetried counts a request sent again on another key of provider after
// the provider refused it on the first.
func (t *Telemetry) KeyRetried(provider string) {
	if t == nil {
		return
	}
	m := t.m
	m.keyRetries.Add(context.Background(), 1, metric.WithAttributes(labelProvider.String(m.providers.value(provider))))
}

// RateLimited counts a request of a priority class answered rate_limited
// after waiting for key capacity as long as it may.
func (t *Telemetry) RateLimited(class string) {
	if t == nil {
		return
	}
	m := t.m
	m.rateLimited.Add(context.Background(), 1, metric.WithAttributes(labelClass.String(m.classes.value(class))))
}
