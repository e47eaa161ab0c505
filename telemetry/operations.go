package telemetry

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// The operations metrics: what an operator's alerts watch beside the turns
// (see deploy/prometheus). None of them costs a turn anything: the swept
// calls are counted by the sweep, the store errors when a store call
// fails, and the age of the oldest pending approval is asked of the
// approvals store on each scrape.

// OldestPending reports how long the oldest approval request still pending
// has waited, or 0 when none is; an error when the store did not answer.
type OldestPending func(ctx context.Context) (time.Duration, error)

// oldestPendingTimeout bounds the scrape's question to the approvals store.
const oldestPendingTimeout = 2 * time.Second

// operations are the instruments of the operations metrics.
type operations struct {
	swept       metric.Int64Counter
	storeErrors metric.Int64Counter
	oldest      atomic.Pointer[OldestPending] // nil: no approvals, 0
}

func newOperations(m metric.Meter) (*operations, error) {
	o := &operations{}
	var err error
	if o.swept, err = m.Int64Counter("gatekeeper.swept_calls",
		metric.WithDescription("Calls in flight whose replica fell silent or restarted, reclaimed by the sweep and charged as estimated.")); err != nil {
		return nil, err
	}
	if o.storeErrors, err = m.Int64Counter("gatekeeper.store_errors",
		metric.WithDescription("Calls to the shared store that did not get its answer (unreachable, timed out, or a reply saying not now).")); err != nil {
		return nil, err
	}
	_, err = m.Float64ObservableGauge("gatekeeper.approvals_oldest_pending", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest approval request still pending has waited, across replicas (0: none pending)."),
		metric.WithFloat64Callback(o.observeOldest))
	if err != nil {
		return nil, err
	}
	// Counters exist from the start at 0, so that a rate over them is
	// defined before their first event.
	o.swept.Add(context.Background(), 0)
	o.storeErrors.Add(context.Background(), 0)
	return o, nil
}

// observeOldest asks the approvals store on each scrape. A store that does
// not answer leaves the series out of this scrape (the store errors say
// why) rather than reporting a wait of 0.
func (o *operations) observeOldest(ctx context.Context, obs metric.Float64Observer) error {
	fn := o.oldest.Load()
	if fn == nil {
		obs.Observe(0)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, oldestPendingTimeout)
	defer cancel()
	d, err := (*fn)(ctx)
	if err != nil {
		return nil
	}
	obs.Observe(d.Seconds())
	return nil
}

// WatchApprovals makes gatekeeper_approvals_oldest_pending_seconds ask fn on
// each scrape; without it the gauge is 0.
func (t *Telemetry) WatchApprovals(fn OldestPending) {
	if t != nil && fn != nil {
		t.m.ops.oldest.Store(&fn)
	}
}

// CallsSwept counts calls the lost-call sweep reclaimed and charged as
// estimated.
func (t *Telemetry) CallsSwept(n int) {
	if t == nil || n <= 0 {
		return
	}
	t.m.ops.swept.Add(context.Background(), int64(n))
}

// StoreFailed counts one call to the shared store that did not get its
// answer.
func (t *Telemetry) StoreFailed() {
	if t == nil {
		return
	}
	t.m.ops.storeErrors.Add(context.Background(), 1)
}
