package telemetry

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The operations metrics exist at 0 from the start (an alert's rate is
// defined before the first event), count what they are told, and the
// oldest pending approval is asked on each scrape; a store that does not
// answer leaves the series out rather than reporting no wait.
func TestOperationsMetrics(t *testing.T) {
	tel, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	const (
		swept   = "gatekeeper_swept_calls_total{}"
		failed  = "gatekeeper_store_errors_total{}"
		pending = "gatekeeper_approvals_pending{}"
		oldest  = "gatekeeper_approvals_oldest_pending_seconds{}"
	)
	check := func(want map[string]float64, absent ...string) {
		t.Helper()
		got := scrape(t, tel)
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s = %v (present %t), want %v", k, g, ok, v)
			}
		}
		for _, k := range absent {
			if _, ok := got[k]; ok {
				t.Errorf("%s is present, want it left out", k)
			}
		}
	}
	check(map[string]float64{swept: 0, failed: 0, pending: 0, oldest: 0})

	tel.CallsSwept(2)
	tel.CallsSwept(0)
	tel.StoreFailed()
	tel.StoreFailed()
	tel.StoreFailed()
	wait, werr := 90*time.Second, error(nil)
	tel.WatchApprovals(func(ctx context.Context) (time.Duration, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("the scrape's question to the approvals store has no deadline")
		}
		return wait, werr
	})
	check(map[string]float64{swept: 2, failed: 3, oldest: 90})

	werr = errors.New("store unreachable")
	check(nil, oldest)
}
