package telemetry

import (
	"math"
	"testing"
	"time"
)

func TestRateLimitMetrics(t *testing.T) {
	tel, _ := newTraced(t, newClock())
	tel.QueueLength("batch", 7)
	tel.QueueLength("batch", 5) // a gauge: the last value counts
	tel.QueueLength("interactive", 1)
	tel.QueueWait("interactive", 250*time.Millisecond)
	tel.Headroom("anthropic/main", 0.25)
	tel.Headroom("anthropic/backup", 0)
	tel.KeyRetried("anthropic")
	tel.KeyRetried("anthropic")
	tel.RateLimited("batch")

	got := scrape(t, tel)
	want := map[string]float64{
		`gatekeeper_ratelimit_queue_length{class="batch"}`:                 5,
		`gatekeeper_ratelimit_queue_length{class="interactive"}`:           1,
		`gatekeeper_ratelimit_queue_wait_seconds_sum{class="interactive"}`: 0.25,
		`gatekeeper_ratelimit_headroom{key="anthropic/main"}`:              0.25,
		`gatekeeper_ratelimit_headroom{key="anthropic/backup"}`:            0,
		`gatekeeper_ratelimit_key_retries_total{provider="anthropic"}`:     2,
		`gatekeeper_ratelimit_rejections_total{class="batch"}`:             1,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || math.Abs(g-v) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}

	var nilTel *Telemetry // a nil Telemetry records nothing and does not panic
	nilTel.QueueLength("batch", 1)
	nilTel.Headroom("k", 1)
	nilTel.KeyRetried("p")
	nilTel.RateLimited("batch")
}
