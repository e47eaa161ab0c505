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

// rateTap keeps what a RateObserver heard.
type rateTap struct {
	queues   map[string]int
	headroom map[string]float64
}

func (r *rateTap) QueueLength(class string, n int)       { r.queues[class] = n }
func (r *rateTap) Headroom(key string, fraction float64) { r.headroom[key] = fraction }

func TestTeeRateLimits(t *testing.T) {
	tel, _ := newTraced(t, newClock())
	tap := &rateTap{queues: map[string]int{}, headroom: map[string]float64{}}
	tel.QueueLength("batch", 9) // before the tee: not passed on
	tel.TeeRateLimits(tap)
	tel.QueueLength("batch", 3)
	tel.Headroom("anthropic/main", 0.5)
	if tap.queues["batch"] != 3 || len(tap.queues) != 1 {
		t.Errorf("queues heard = %v, want batch: 3", tap.queues)
	}
	if tap.headroom["anthropic/main"] != 0.5 || len(tap.headroom) != 1 {
		t.Errorf("headroom heard = %v, want anthropic/main: 0.5", tap.headroom)
	}
	if got := scrape(t, tel)[`gatekeeper_ratelimit_queue_length{class="batch"}`]; got != 3 {
		t.Errorf("the gauge = %v, want 3: the tee must not replace the metric", got)
	}
}
