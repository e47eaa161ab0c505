package telemetry

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

const sonnetLabels = `model="claude-sonnet-4-5",provider="anthropic-eu",tenant="team-a"`

func TestTurnMetrics(t *testing.T) {
	c := newClock()
	tel, _ := newTraced(t, c)

	_, turn := tel.StartTurn(t.Context(), nil, sonnetStart)
	c.advance(250 * time.Millisecond)
	turn.FirstByte()
	c.advance(100 * time.Millisecond)
	turn.FirstByte() // only the first counts
	c.advance(750 * time.Millisecond)
	turn.End(TurnEnd{Stop: "tool_use", InputTokens: 10, CachedInputTokens: 1000, CacheWriteTokens: 200, OutputTokens: 50, Dollars: 0.25})

	_, turn = tel.StartTurn(t.Context(), nil, sonnetStart)
	c.advance(2 * time.Second)
	turn.FirstByte()
	turn.End(TurnEnd{Stop: "end_turn", InputTokens: 5, OutputTokens: 7, Dollars: 0.5, Estimated: true})
	turn.End(TurnEnd{Stop: "end_turn", InputTokens: 5, OutputTokens: 7, Dollars: 0.5}) // ignored

	_, turn = tel.StartTurn(t.Context(), nil, sonnetStart)
	c.advance(time.Second)
	turn.End(TurnEnd{Status: 529, ErrorType: "overloaded"})

	got := scrape(t, tel)
	genAI := `gen_ai_operation_name="chat",gen_ai_provider_name="anthropic",gen_ai_request_model="claude-sonnet-4-5"`
	want := map[string]float64{
		`gatekeeper_turns_total{model="claude-sonnet-4-5",provider="anthropic-eu",stop="tool_use",tenant="team-a"}`:                1,
		`gatekeeper_turns_total{model="claude-sonnet-4-5",provider="anthropic-eu",stop="end_turn",tenant="team-a"}`:                1,
		`gatekeeper_turns_total{model="claude-sonnet-4-5",provider="anthropic-eu",stop="",tenant="team-a"}`:                        1,
		`gatekeeper_tokens_total{` + sonnetLabels + `,type="input"}`:                                                               15,
		`gatekeeper_tokens_total{` + sonnetLabels + `,type="cached_input"}`:                                                        1000,
		`gatekeeper_tokens_total{` + sonnetLabels + `,type="cache_write"}`:                                                         200,
		`gatekeeper_tokens_total{` + sonnetLabels + `,type="output"}`:                                                              57,
		`gatekeeper_dollars_total{` + sonnetLabels + `}`:                                                                           0.75,
		`gatekeeper_time_to_first_token_seconds_count{` + sonnetLabels + `}`:                                                       2,
		`gatekeeper_time_to_first_token_seconds_sum{` + sonnetLabels + `}`:                                                         2.25,
		`gatekeeper_turn_duration_seconds_count{` + sonnetLabels + `}`:                                                             3,
		`gatekeeper_turn_duration_seconds_sum{` + sonnetLabels + `}`:                                                               4.1,
		`gen_ai_client_operation_duration_seconds_count{` + genAI + `,server_address="api.anthropic.com"}`:                         2,
		`gen_ai_client_operation_duration_seconds_sum{` + genAI + `,server_address="api.anthropic.com"}`:                           3.1,
		`gen_ai_client_operation_duration_seconds_count{error_type="overloaded",` + genAI + `,server_address="api.anthropic.com"}`: 1,
		`gen_ai_client_token_usage_count{` + genAI + `,gen_ai_token_type="input",server_address="api.anthropic.com"}`:              2,
		`gen_ai_client_token_usage_sum{` + genAI + `,gen_ai_token_type="input",server_address="api.anthropic.com"}`:                1215,
		`gen_ai_client_token_usage_sum{` + genAI + `,gen_ai_token_type="output",server_address="api.anthropic.com"}`:               57,
	}
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("missing %s", k)
			continue
		}
		if math.Abs(g-v) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
	for k := range got {
		if strings.Contains(k, "run-42") {
			t.Errorf("a trajectory id is a label: %s", k)
		}
	}
}

func TestMetricNames(t *testing.T) {
	tel, _ := newTraced(t, newClock())
	_, turn := tel.StartTurn(t.Context(), nil, sonnetStart)
	turn.FirstByte()
	turn.End(TurnEnd{InputTokens: 1, OutputTokens: 1, Dollars: 0.1})
	tel.StageChanged("team-a", "nominal", "steer")
	tel.StateChanged("team-a", "", "READY")
	tel.UpstreamError("anthropic-eu", "timeout")
	tel.ApprovalPending(1)
	tel.ApprovalDecided("release", "approved", time.Minute)
	tel.QueueWait("batch", time.Second)
	tel.QueueLength("batch", 3)
	tel.Headroom("anthropic/main", 0.5)
	tel.KeyRetried("anthropic")
	tel.RateLimited("batch")

	want := []string{
		"gatekeeper_approval_decision_seconds_count", "gatekeeper_approval_decision_seconds_sum",
		"gatekeeper_approvals_oldest_pending_seconds",
		"gatekeeper_approvals_pending",
		"gatekeeper_budget_stage_transitions_total",
		"gatekeeper_dollars_total",
		"gatekeeper_ratelimit_headroom",
		"gatekeeper_ratelimit_key_retries_total",
		"gatekeeper_ratelimit_queue_length",
		"gatekeeper_ratelimit_queue_wait_seconds_count", "gatekeeper_ratelimit_queue_wait_seconds_sum",
		"gatekeeper_ratelimit_rejections_total",
		"gatekeeper_store_errors_total",
		"gatekeeper_swept_calls_total",
		"gatekeeper_time_to_first_token_seconds_count", "gatekeeper_time_to_first_token_seconds_sum",
		"gatekeeper_tokens_total",
		"gatekeeper_trajectories",
		"gatekeeper_turn_duration_seconds_count", "gatekeeper_turn_duration_seconds_sum",
		"gatekeeper_turns_total",
		"gatekeeper_upstream_errors_total",
		"gen_ai_client_operation_duration_seconds_count", "gen_ai_client_operation_duration_seconds_sum",
		"gen_ai_client_token_usage_count", "gen_ai_client_token_usage_sum",
		"target_info",
	}
	var got []string
	for _, n := range names(scrape(t, tel)) {
		// The runtime's and process's own metrics are TestRuntimeMetrics'.
		if !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") {
			got = append(got, n)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("metric names\n got %q\nwant %q", got, want)
	}
}

// TestRuntimeMetrics: /metrics carries the standard Go runtime and process
// counters operators chart, and the load benchmark reads allocations per
// turn from.
func TestRuntimeMetrics(t *testing.T) {
	tel, _ := newTraced(t, newClock())
	got := scrape(t, tel)
	want := []string{"go_memstats_alloc_bytes_total{}", "go_memstats_mallocs_total{}", "go_goroutines{}"}
	if runtime.GOOS == "linux" {
		want = append(want, "process_cpu_seconds_total{}", "process_resident_memory_bytes{}")
	}
	for _, name := range want {
		v, ok := got[name]
		if !ok {
			t.Errorf("no %s in the scrape", name)
			continue
		}
		if v <= 0 {
			t.Errorf("%s = %v, want more than 0", name, v)
		}
	}
}

func TestModelLabelIsBounded(t *testing.T) {
	tel, _ := newTraced(t, newClock())
	const models = maxLabelValues + 50
	for i := range models {
		s := sonnetStart
		s.Model = fmt.Sprintf("model-%03d", i)
		_, turn := tel.StartTurn(t.Context(), nil, s)
		turn.End(TurnEnd{Stop: "end_turn"})
	}
	// A model seen before the bound was reached keeps its own label.
	s := sonnetStart
	s.Model = "model-000"
	_, turn := tel.StartTurn(t.Context(), nil, s)
	turn.End(TurnEnd{Stop: "end_turn"})

	distinct := map[string]float64{}
	for k, v := range scrape(t, tel) {
		if !strings.HasPrefix(k, "gatekeeper_turns_total{") {
			continue
		}
		_, rest, _ := strings.Cut(k, `model="`)
		model, _, _ := strings.Cut(rest, `"`)
		distinct[model] += v
	}
	if len(distinct) != maxLabelValues+1 {
		t.Errorf("%d distinct model labels, want %d and %q", len(distinct), maxLabelValues, otherLabel)
	}
	if distinct[otherLabel] != 50 {
		t.Errorf("other = %v turns, want 50", distinct[otherLabel])
	}
	if distinct["model-000"] != 2 || distinct["model-099"] != 1 {
		t.Errorf("model-000 = %v, model-099 = %v; want 2 and 1", distinct["model-000"], distinct["model-099"])
	}
	if _, ok := distinct["model-100"]; ok {
		t.Error("the 101st model has its own label")
	}
}

func TestBoundedConcurrent(t *testing.T) {
	b := newBounded()
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 100 {
				b.value(fmt.Sprintf("v%d-%d", g, i))
			}
		}()
	}
	for range 4 {
		<-done
	}
	if len(b.seen) != maxLabelValues {
		t.Errorf("%d values admitted, want %d", len(b.seen), maxLabelValues)
	}
}

func TestControlMetrics(t *testing.T) {
	tel, _ := newTraced(t, newClock())
	for _, step := range [][2]string{
		{"", "READY"}, {"", "READY"}, {"READY", "CALLING_MODEL"}, {"CALLING_MODEL", "WAITING_TOOL"},
		{"WAITING_TOOL", "WAITING_TOOL"}, {"READY", "COMPLETED"}, {"COMPLETED", ""},
	} {
		tel.StateChanged("team-a", step[0], step[1])
	}
	tel.StageChanged("team-a", "nominal", "steer")
	tel.StageChanged("team-a", "steer", "restrict")
	tel.StageChanged("team-b", "nominal", "steer")
	tel.UpstreamError("anthropic-eu", "overloaded")
	tel.UpstreamError("anthropic-eu", "overloaded")
	tel.UpstreamError("openai", "timeout")
	tel.ApprovalPending(1)
	tel.ApprovalPending(1)
	tel.ApprovalPending(1)
	tel.ApprovalPending(-1)
	tel.ApprovalDecided("release", "approved", 90*time.Second)
	tel.ApprovalDecided("release", "denied", 30*time.Second)
	tel.ApprovalDecided("release", "approved", 30*time.Second)
	tel.QueueWait("batch", 1500*time.Millisecond)
	tel.QueueWait("interactive", 0)

	got := scrape(t, tel)
	want := map[string]float64{
		`gatekeeper_trajectories{state="READY",tenant="team-a"}`:                                0,
		`gatekeeper_trajectories{state="CALLING_MODEL",tenant="team-a"}`:                        0,
		`gatekeeper_trajectories{state="WAITING_TOOL",tenant="team-a"}`:                         1,
		`gatekeeper_trajectories{state="COMPLETED",tenant="team-a"}`:                            0,
		`gatekeeper_budget_stage_transitions_total{from="nominal",tenant="team-a",to="steer"}`:  1,
		`gatekeeper_budget_stage_transitions_total{from="steer",tenant="team-a",to="restrict"}`: 1,
		`gatekeeper_budget_stage_transitions_total{from="nominal",tenant="team-b",to="steer"}`:  1,
		`gatekeeper_upstream_errors_total{provider="anthropic-eu",type="overloaded"}`:           2,
		`gatekeeper_upstream_errors_total{provider="openai",type="timeout"}`:                    1,
		`gatekeeper_approvals_pending{}`:                                                        2,
		`gatekeeper_approval_decision_seconds_count{gate="release",outcome="approved"}`:         2,
		`gatekeeper_approval_decision_seconds_sum{gate="release",outcome="approved"}`:           120,
		`gatekeeper_approval_decision_seconds_count{gate="release",outcome="denied"}`:           1,
		`gatekeeper_ratelimit_queue_wait_seconds_sum{class="batch"}`:                            1.5,
		`gatekeeper_ratelimit_queue_wait_seconds_count{class="interactive"}`:                    1,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || math.Abs(g-v) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

func TestHandlerUsesOwnRegistry(t *testing.T) {
	a, _ := newTraced(t, newClock())
	b, _ := newTraced(t, newClock())
	a.UpstreamError("p", "timeout")
	if _, ok := scrape(t, b)[`gatekeeper_upstream_errors_total{provider="p",type="timeout"}`]; ok {
		t.Error("one Telemetry's metric shows in another's scrape")
	}
	if got := scrape(t, a)[`gatekeeper_upstream_errors_total{provider="p",type="timeout"}`]; got != 1 {
		t.Errorf("got %v, want 1", got)
	}
}

func TestSeriesCacheIsBounded(t *testing.T) {
	var c seriesCache
	k := seriesKey{tenant: "t", provider: "p", providerName: "openai", server: "s"}
	for i := range maxCachedSeries + 10 {
		k.model = fmt.Sprintf("m%d", i)
		if s := c.get(k); s.genAI[2].Value.AsString() != k.model {
			t.Fatalf("series of %s carries model %s", k.model, s.genAI[2].Value.AsString())
		}
	}
	if n := c.n.Load(); n != maxCachedSeries {
		t.Errorf("%d series cached, want %d", n, maxCachedSeries)
	}
	k.model = "m0"
	if c.get(k) != c.get(k) {
		t.Error("a cached series is rebuilt")
	}
}

// TestModelLabelBoundPerTenant: a tenant inventing model names fills its
// own bound, and another tenant's models keep their labels.
func TestModelLabelBoundPerTenant(t *testing.T) {
	tel, _ := newTraced(t, newClock())
	turn := func(tenant, model, stop string) {
		s := sonnetStart
		s.Tenant, s.Model = tenant, model
		_, tt := tel.StartTurn(t.Context(), nil, s)
		tt.End(TurnEnd{Stop: stop})
	}
	for i := range maxLabelValues + 20 {
		turn("noisy", fmt.Sprintf("bogus-%03d", i), fmt.Sprintf("stop-%03d", i))
	}
	turn("quiet", "claude-sonnet-4-5", "end_turn")
	turn("quiet", "claude-haiku-4-5", "tool_use")

	got := scrape(t, tel)
	for _, series := range []string{
		fmt.Sprintf(`gatekeeper_turns_total{model="claude-sonnet-4-5",provider=%q,stop="end_turn",tenant="quiet"}`, sonnetStart.Provider),
		fmt.Sprintf(`gatekeeper_turns_total{model="claude-haiku-4-5",provider=%q,stop="tool_use",tenant="quiet"}`, sonnetStart.Provider),
	} {
		if got[series] != 1 {
			t.Errorf("%s = %v, want 1 (the other tenant's invented names must not push it into %q)", series, got[series], otherLabel)
		}
	}
	noisyOther := 0.0
	for k, v := range got {
		if strings.HasPrefix(k, "gatekeeper_turns_total{") && strings.Contains(k, `tenant="noisy"`) && strings.Contains(k, `model="other"`) {
			noisyOther += v
		}
	}
	if noisyOther != 20 {
		t.Errorf("the noisy tenant's turns counted as model %q: %v, want 20", otherLabel, noisyOther)
	}
}

// TestMetricsToken: with telemetry.metrics_token set, /metrics answers 401
// without the token or with a wrong one, and serves it with the right one.
func TestMetricsToken(t *testing.T) {
	const token = "metrics-token-0123456789"
	cfg := defaultTelemetryConfig()
	cfg.MetricsToken = token
	tel, err := New(t.Context(), Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	tel.QueueLength("batch", 3)
	srv := httptest.NewServer(tel.Handler())
	defer srv.Close()

	tests := []struct {
		name, auth string
		want       int
	}{
		{"none", "", http.StatusUnauthorized},
		{"wrong", "Bearer metrics-token-0123456780", http.StatusUnauthorized},
		{"prefix", "Bearer " + token[:len(token)-1], http.StatusUnauthorized},
		{"longer", "Bearer " + token + "x", http.StatusUnauthorized},
		{"other scheme", "Basic " + token, http.StatusUnauthorized},
		{"bare token", token, http.StatusUnauthorized},
		{"right", "Bearer " + token, http.StatusOK},
		{"scheme in lower case", "bearer " + token, http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/metrics", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
			}
			exposed := strings.Contains(string(body), "gatekeeper_ratelimit_queue_length")
			if exposed != (tc.want == http.StatusOK) {
				t.Errorf("metrics in the body: %v, want %v", exposed, tc.want == http.StatusOK)
			}
			if tc.want == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
}

// TestTurnMetricsAllocateNothing: once a series was seen, moving a turn's
// metrics (its end, the trajectories gauge, the key's queue wait and
// headroom) allocates nothing: the label sets and the option lists the
// instruments take are built once.
func TestTurnMetricsAllocateNothing(t *testing.T) {
	c := newClock()
	tel, _ := newTraced(t, c)
	_, turn := tel.StartTurn(t.Context(), nil, sonnetStart)
	end := TurnEnd{Stop: "end_turn", InputTokens: 10, CachedInputTokens: 5, CacheWriteTokens: 2, OutputTokens: 7, Dollars: 0.01}
	record := func() {
		tel.StateChanged("team-a", "READY", "CALLING_MODEL")
		tel.QueueWait("interactive", time.Millisecond)
		tel.Headroom("anthropic-eu/main", 0.5)
		turn.record(end, 17, time.Second)
		tel.StateChanged("team-a", "CALLING_MODEL", "READY")
	}
	record()
	if n := testing.AllocsPerRun(100, record); n != 0 {
		t.Errorf("a turn's metrics allocate %.1f times, want 0", n)
	}
}
