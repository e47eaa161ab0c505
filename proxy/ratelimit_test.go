package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"

	"gatekeeper/config"
	"gatekeeper/mockprovider"
	"gatekeeper/proxy"
	"gatekeeper/ratelimit"
	"gatekeeper/store/memory"
	"gatekeeper/telemetry"
	"gatekeeper/trajectory"
)

// Virtual keys of the rate-limit tests' tenants, one per priority class.
const (
	vkLive = "vk-live-0123456789"  // interactive
	vkStd  = "vk-std-0123456789"   // standard
	vkBulk = "vk-batch-0123456789" // batch
)

// rlOpts configure a gatekeeper with limited provider keys in front of a
// mock that enforces its own rate limits.
type rlOpts struct {
	keys    string // YAML list of the anthropic provider's keys
	maxWait string
	// storeTimeout, when set, is store.timeout: the bound on each store
	// and shared-bucket call. A heavily loaded test sets it long so that
	// a call slowed by the machine is not taken for a store outage (503).
	storeTimeout string
	mock         mockprovider.RateLimit
	buckets      ratelimit.Buckets // nil: in memory
	mockURL      string            // an existing mock to share; "" starts one
	store        trajectory.Store  // nil: a memory store of its own
	// rates, when set, hears the scheduler's queue lengths and key
	// headroom from the start.
	rates telemetry.RateObserver
}

// rlEnv is that gatekeeper and its mock.
type rlEnv struct {
	mock    *mockprovider.Server
	mockURL string
	gk      string
	px      *proxy.Server
	tel     *telemetry.Telemetry
	store   trajectory.Store
}

func newRLEnv(t testing.TB, o rlOpts) *rlEnv {
	t.Helper()
	e := &rlEnv{mockURL: o.mockURL}
	if e.mockURL == "" {
		e.mock = mockprovider.New(mockprovider.Options{RateLimit: o.mock, MaxRecords: 100000})
		ts := httptest.NewServer(e.mock)
		t.Cleanup(ts.Close)
		e.mockURL = ts.URL
	}
	cfg := rlConfig(t, e.mockURL, o)
	var err error
	e.tel, err = telemetry.New(context.Background(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o.rates != nil {
		e.tel.TeeRateLimits(o.rates)
	}
	e.store = o.store
	if e.store == nil {
		st := memory.New(memory.Options{})
		t.Cleanup(func() { _ = st.Close() })
		e.store = st
	}
	e.px, err = proxy.New(proxy.Options{Config: cfg, Store: e.store, Ledger: memory.NewLedger(nil), Telemetry: e.tel, Buckets: o.buckets})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	e.px.Routes(r)
	gk := httptest.NewServer(r)
	t.Cleanup(func() {
		gk.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.px.Close(ctx)
		_ = e.tel.Shutdown(ctx)
	})
	e.gk = gk.URL
	return e
}

// rlConfig is the rate-limit tests' config, on the mock at mockURL.
func rlConfig(t testing.TB, mockURL string, o rlOpts) *config.Config {
	t.Helper()
	doc := fmt.Sprintf(`
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: %s}
tenants:
  - {name: live, keys: [%s], priority: interactive}
  - {name: std, keys: [%s], priority: standard}
  - {name: bulk, keys: [%s], priority: batch}
rate_limits: {max_wait: %s}
`, mockURL, o.keys, vkLive, vkStd, vkBulk, o.maxWait)
	if o.storeTimeout != "" {
		doc += fmt.Sprintf("store: {timeout: %s}\n", o.storeTimeout)
	}
	cfg, err := config.Parse([]byte(doc), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// rlAnswer is what an agent got for one turn.
type rlAnswer struct {
	status     int
	typ        string // the error type, for errors
	retryAfter string
	waitMs     int64 // X-Gatekeeper-Queue-Wait-Ms; 0 when absent
	body       string
}

// turn sends one non-streamed Anthropic turn as vk on trajectory id.
func (e *rlEnv) turn(t testing.TB, ctx context.Context, vk, id, body string, hdr ...string) (rlAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.gk+"/t/"+id+"/anthropic/v1/messages", strings.NewReader(body))
	if err != nil {
		return rlAnswer{}, err
	}
	req.Header.Set("x-api-key", vk)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("content-type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return rlAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return rlAnswer{}, err
	}
	a := rlAnswer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b)}
	if v := resp.Header.Get("X-Gatekeeper-Queue-Wait-Ms"); v != "" {
		a.waitMs, _ = strconv.ParseInt(v, 10, 64)
	}
	if resp.StatusCode != http.StatusOK {
		a.typ = errorType(b)
	}
	return a, nil
}

// errorType reads the type of an Anthropic error body.
func errorType(b []byte) string {
	s := string(b)
	i := strings.Index(s, `"error":{`)
	if i < 0 {
		return ""
	}
	s = s[i:]
	j := strings.Index(s, `"type":"`)
	if j < 0 {
		return ""
	}
	s = s[j+len(`"type":"`):]
	typ, _, _ := strings.Cut(s, `"`)
	return typ
}

// metric sums the samples of a metric whose labels contain every one of
// match, from the telemetry's /metrics.
func (e *rlEnv) metric(t testing.TB, name string, match ...string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	e.tel.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	var v float64
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, m := range match {
			ok = ok && strings.Contains(line, m)
		}
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		v += f
	}
	return v
}

const smallTurn = `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"status?"}]}`

// directTurn sends a turn straight to the mock with a provider key.
func directTurn(t testing.TB, mockURL, key, body, spec string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, mockURL+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", key)
	req.Header.Set("content-type", "application/json")
	if spec != "" {
		req.Header.Set(mockprovider.HeaderTurn, spec)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestRateLimitRetryOnAnotherKey: a key the provider refuses (429) is
// cooled for the provider's Retry-After and the turn goes to the other key
// before the agent sees anything; with every key cooled or reported empty
// (remaining 0, reset in a minute), a turn waits max_wait and gets
// rate_limited with a Retry-After; with every key refused the agent gets
// the provider's 429. The agent never sees a provider
// key, and a turn that was never sent is not charged.
func TestRateLimitRetryOnAnotherKey(t *testing.T) {
	const k1, k2 = "sk-pool-key-one", "sk-pool-key-two"
	e := newRLEnv(t, rlOpts{
		keys:    fmt.Sprintf(`[{name: k1, key: %s, rpm: 1000}, {name: k2, key: %s, rpm: 1000}]`, k1, k2),
		maxWait: "1s",
		mock:    mockprovider.RateLimit{RPM: 1}, // the provider's real limit: one a minute
	})
	// k1's minute is used up at the provider, which gatekeeper cannot know.
	if code := directTurn(t, e.mockURL, k1, smallTurn, ""); code != http.StatusOK {
		t.Fatalf("direct turn: %d", code)
	}
	ctx := ctxT(t)

	a, err := e.turn(t, ctx, vkStd, "retry-1", smallTurn)
	if err != nil {
		t.Fatal(err)
	}
	if a.status != http.StatusOK {
		t.Fatalf("first turn: %d %s, want 200 from the other key", a.status, a.body)
	}
	var keys []string
	var statuses []int
	for _, r := range e.mock.Requests()[1:] {
		keys, statuses = append(keys, r.APIKey), append(statuses, r.Status)
	}
	if fmt.Sprint(keys) != fmt.Sprint([]string{k1, k2}) || fmt.Sprint(statuses) != "[429 200]" {
		t.Errorf("provider saw keys %v with statuses %v, want k1 refused then k2", keys, statuses)
	}
	if got := e.metric(t, "gatekeeper_ratelimit_key_retries_total", `provider="anthropic"`); got != 1 {
		t.Errorf("retries metric %v, want 1", got)
	}
	if got := e.metric(t, "gatekeeper_ratelimit_headroom", `key="anthropic/k1"`); got != 0 {
		t.Errorf("headroom of the cooled key %v, want 0", got)
	}
	if got := e.metric(t, "gatekeeper_ratelimit_headroom", `key="anthropic/k2"`); got <= 0 || got > 1 {
		t.Errorf("headroom of the other key %v, want in (0, 1]", got)
	}
	if n := e.metric(t, "gatekeeper_ratelimit_headroom", k1) + e.metric(t, "gatekeeper_ratelimit_headroom", k2); n != 0 {
		t.Error("a provider key is a metric label")
	}

	// k2 has now used its minute too, and its reply said so: nothing
	// left, full again in a minute (its reset). k1 is cooled for the
	// provider's Retry-After. The next turn waits max_wait and is
	// answered by gatekeeper, never sent.
	a, err = e.turn(t, ctx, vkLive, "retry-3", smallTurn)
	if err != nil {
		t.Fatal(err)
	}
	if a.status != http.StatusTooManyRequests || a.typ != "rate_limited" {
		t.Fatalf("second turn: %d %s, want gatekeeper's rate_limited", a.status, a.body)
	}
	if n, err := strconv.Atoi(a.retryAfter); err != nil || n < 1 {
		t.Errorf("rate_limited Retry-After %q, want whole seconds >= 1", a.retryAfter)
	}
	if a.waitMs < 1000 {
		t.Errorf("X-Gatekeeper-Queue-Wait-Ms %d, want the max_wait it waited", a.waitMs)
	}
	if n := len(e.mock.Requests()); n != 3 {
		t.Errorf("the provider got %d requests, want 3: a rate_limited turn is never sent", n)
	}
	if got := e.metric(t, "gatekeeper_ratelimit_rejections_total", `class="interactive"`); got != 1 {
		t.Errorf("rate_limited metric %v, want 1", got)
	}
	rec, err := e.store.Get(ctx, "retry-3")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != trajectory.Ready || rec.Turns != 0 || rec.Spend.Turns != 0 || rec.Call != "" {
		t.Errorf("rate-limited record: state %s, %d turns, spend %+v, call %q; want READY, nothing charged, no call held",
			rec.State, rec.Turns, rec.Spend, rec.Call)
	}
	for _, s := range []string{a.body, a.retryAfter} {
		if strings.Contains(s, k1) || strings.Contains(s, k2) {
			t.Error("a provider key reached the agent")
		}
	}

	// Both keys' minutes spent at the provider, which gatekeeper cannot
	// know: each refuses the turn in turn, and the agent gets the
	// provider's own 429 and Retry-After.
	e2 := newRLEnv(t, rlOpts{
		keys:    fmt.Sprintf(`[{name: k1, key: %s, rpm: 1000}, {name: k2, key: %s, rpm: 1000}]`, k1, k2),
		maxWait: "1s",
		mock:    mockprovider.RateLimit{RPM: 1},
	})
	for _, k := range []string{k1, k2} {
		if code := directTurn(t, e2.mockURL, k, smallTurn, ""); code != http.StatusOK {
			t.Fatalf("direct turn: %d", code)
		}
	}
	a, err = e2.turn(t, ctx, vkStd, "retry-2", smallTurn)
	if err != nil {
		t.Fatal(err)
	}
	if a.status != http.StatusTooManyRequests || a.typ != "rate_limit_error" || a.retryAfter == "" {
		t.Fatalf("every key refused: %d %q retry-after %q, want the provider's 429 with its Retry-After", a.status, a.typ, a.retryAfter)
	}
	if n := len(e2.mock.Requests()); n != 4 {
		t.Errorf("the provider got %d requests, want 4: two direct, then the turn on each key once", n)
	}
}

// startMock serves mock on loopback for the test.
func startMock(t testing.TB, mock *mockprovider.Server) string {
	t.Helper()
	ts := httptest.NewServer(mock)
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestRateLimitClientLeavesQueue: an agent that gives up while its turn
// waits for key capacity leaves the queue; the turn is never sent, its
// record is ready again and charged nothing.
func TestRateLimitClientLeavesQueue(t *testing.T) {
	e := newRLEnv(t, rlOpts{keys: `[{name: k, key: sk-queue-key, rpm: 1}]`, maxWait: "30s"})
	if a, err := e.turn(t, ctxT(t), vkBulk, "queue-1", smallTurn); err != nil || a.status != http.StatusOK {
		t.Fatalf("first turn: %v %+v", err, a)
	}
	// The key's one request a minute is spent: the next turn waits.
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() {
		_, err := e.turn(t, ctx, vkBulk, "queue-2", smallTurn)
		done <- err
	}()
	waitFor(t, "the turn to queue", func() bool {
		return e.metric(t, "gatekeeper_ratelimit_queue_length", `class="batch"`) == 1
	})
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the canceled request got an answer")
	}
	waitFor(t, "the queue to empty", func() bool {
		return e.metric(t, "gatekeeper_ratelimit_queue_length", `class="batch"`) == 0
	})
	var rec *trajectory.Record
	waitFor(t, "the record to settle", func() bool {
		r, err := e.store.Get(context.Background(), "queue-2")
		rec = r
		return err == nil && rec.Call == ""
	})
	if rec.State != trajectory.Ready || rec.Turns != 0 || rec.Spend.Turns != 0 {
		t.Errorf("record after the agent left: state %s, %d turns, spend %+v", rec.State, rec.Turns, rec.Spend)
	}
	if n := len(e.mock.Requests()); n != 1 {
		t.Errorf("the provider got %d requests, want only the first turn", n)
	}
}

// TestRateLimitOpenAIKeyPool: the OpenAI SDK through a pool of two OpenAI
// keys, the first refused by the provider: the turn is sent again with the
// second key as a bearer token, and the SDK sees one answer.
func TestRateLimitOpenAIKeyPool(t *testing.T) {
	const k1, k2 = "sk-oai-pool-one", "sk-oai-pool-two"
	mock := mockprovider.New(mockprovider.Options{RateLimit: mockprovider.RateLimit{RPM: 1}})
	mockURL := startMock(t, mock)
	doc := fmt.Sprintf(`
providers:
  - {name: openai, api: openai, base_url: %q, keys: [{name: k1, key: %s, rpm: 600}, {name: k2, key: %s, rpm: 600}]}
tenants:
  - {name: std, keys: [%s]}
`, mockURL, k1, k2, vkStd)
	cfg, err := config.Parse([]byte(doc), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{})
	px, err := proxy.New(proxy.Options{Config: cfg, Store: st, Ledger: memory.NewLedger(nil)})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	px.Routes(r)
	gk := httptest.NewServer(r)
	t.Cleanup(func() { gk.Close(); px.Close(context.Background()); _ = st.Close() })

	// k1's minute is spent at the provider.
	req, _ := http.NewRequest(http.MethodPost, mockURL+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+k1)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("direct turn: %v %v", err, resp)
	}
	resp.Body.Close()

	c := openai.NewClient(ooption.WithBaseURL(gk.URL+"/t/oai-pool/openai/v1"), ooption.WithAPIKey(vkStd), ooption.WithMaxRetries(0))
	if _, err := c.Chat.Completions.New(ctxT(t), chatParams()); err != nil {
		t.Fatalf("chat through the pool: %v", err)
	}
	var got []string
	for _, r := range mock.Requests()[1:] {
		got = append(got, fmt.Sprintf("%s %d", r.APIKey, r.Status))
	}
	if want := []string{k1 + " 429", k2 + " 200"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("provider saw %v, want %v", got, want)
	}
}

// TestRateLimitMixedPool: a pool of a key without limits and a limited
// one. The key without limits is measured against the limited one instead
// of taking every turn: turns sent one after the other share the keys, and
// none waits. Once the provider refuses it (its own limit, which gatekeeper
// was not told), it is cooled and the limited key takes the turns.
func TestRateLimitMixedPool(t *testing.T) {
	const free, lim = "sk-mixed-free", "sk-mixed-lim"
	e := newRLEnv(t, rlOpts{
		// The key without limits first: ranked at a headroom of 1 it
		// would win every turn.
		keys:    fmt.Sprintf(`[{name: free, key: %s}, {name: lim, key: %s, rpm: 600}]`, free, lim),
		maxWait: "30s",
		mock:    mockprovider.RateLimit{InputTPM: 600_000, Quantum: time.Second},
	})
	ctx := ctxT(t)
	on := func(from int) map[string]int {
		n := map[string]int{}
		for _, r := range e.mock.Requests()[from:] {
			n[fmt.Sprintf("%s %d", r.APIKey, r.Status)]++
		}
		return n
	}
	for i := range 30 {
		a, err := e.turn(t, ctx, vkStd, fmt.Sprintf("mixed-%d", i), smallTurn)
		if err != nil || a.status != http.StatusOK {
			t.Fatalf("turn %d: %v %d %s", i, err, a.status, a.body)
		}
		if a.waitMs != 0 {
			t.Errorf("turn %d waited %d ms with a key without limits in the pool", i, a.waitMs)
		}
	}
	got := on(0)
	t.Logf("30 turns one after the other: %v", got)
	if got[free+" 200"] < 5 || got[lim+" 200"] < 5 {
		t.Errorf("30 turns went %v, want both keys used", got)
	}

	// The provider's own limit on the free key is spent, which gatekeeper
	// cannot know: its next turn there is refused, sent again on the
	// limited key, and the free key is left alone for the Retry-After.
	// The provider admits so large a turn on a full bucket: its bucket
	// for the free key refills within a second of the turns above.
	time.Sleep(1100 * time.Millisecond)
	if code := directTurn(t, e.mockURL, free, smallTurn, `{"usage":{"input_tokens":600000}}`); code != http.StatusOK {
		t.Fatalf("direct turn: %d", code)
	}
	from := len(e.mock.Requests())
	for i := range 6 {
		a, err := e.turn(t, ctx, vkStd, fmt.Sprintf("mixed-cooled-%d", i), smallTurn)
		if err != nil || a.status != http.StatusOK {
			t.Fatalf("turn %d after the free key's limit was spent: %v %d %s; the provider saw %v", i, err, a.status, a.body, on(from))
		}
	}
	got = on(from)
	t.Logf("6 turns after the free key's limit was spent: %v", got)
	if got[free+" 429"] > 1 || got[lim+" 200"] != 6 || got[free+" 200"] != 0 {
		t.Errorf("6 turns went %v, want at most one refusal on the free key and every turn served by the limited one", got)
	}
}
