package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	goredis "github.com/redis/go-redis/v9"

	gkclock "gatekeeper/internal/clock"
	"gatekeeper/internal/redistest"
	"gatekeeper/mockprovider"
	"gatekeeper/ratelimit"
	redisstore "gatekeeper/store/redis"
	"gatekeeper/telemetry"
)

// A key's bucket holds one second of its limit: a test that must see a
// saturated key from its start first spends that second. drain sends one
// turn whose reply reports usage of a second's input tokens: the provider
// (the mock) charges it as it admits the turn and gatekeeper when it
// corrects the turn's estimate, so gatekeeper starts from an empty bucket.
// Turns go to the key with the most headroom, so n turns drain n keys.
func drain(t *testing.T, e *rlEnv, inputTPM int64, n int) {
	t.Helper()
	spec := fmt.Sprintf(`{"usage":{"input_tokens":%d,"output_tokens":1}}`, ratelimit.DefaultBurst(inputTPM))
	for i := range n {
		a, err := e.turn(t, ctxT(t), vkStd, fmt.Sprintf("drain-%d", i), smallTurn, mockprovider.HeaderTurn, spec)
		if err != nil || a.status != http.StatusOK {
			t.Fatalf("draining turn %d: %v %d %s", i, err, a.status, a.body)
		}
	}
}

// prompt is a user message of about n bytes.
func prompt(n int) string { return strings.Repeat("word ", n/5) }

func turnBody(promptBytes int) string {
	return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":%q}]}`, prompt(promptBytes))
}

// TestRateLimitManyClients is the must-show of provider key pools: 200
// clients of the three classes, half of them the official Anthropic SDK
// (a quarter streaming),
// against a provider that answers 429 above its per-key limits. With
// gatekeeper in front the provider refuses (almost) nothing, and every
// client either succeeds or is told rate_limited with a Retry-After, which
// it honours until it succeeds.
func TestRateLimitManyClients(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	// The turns are large enough that the load exceeds the keys' limits
	// however slowly a loaded machine sends it: the two keys take ~16 turns
	// a second, and 200 clients of ~400-token turns queue past max_wait
	// even when they reach gatekeeper over several seconds. (With
	// ~100-token turns the keys took ~66 a second, more than a busy core
	// of race-instrumented clients sends, and nothing queued.)
	const (
		k1, k2      = "sk-many-key-one", "sk-many-key-two"
		tpm         = 200_000 // per key: 3333 input tokens a second, ~8 turns of ~400 tokens
		clients     = 200
		tries       = 20
		promptBytes = 1600
	)
	e := newRLEnv(t, rlOpts{
		keys:    fmt.Sprintf(`[{name: k1, key: %s, input_tpm: %d}, {name: k2, key: %s, input_tpm: %d}]`, k1, tpm, k2, tpm),
		maxWait: "1s",
		// Two hundred clients on a loaded machine can hold a store call
		// past the default 2s: that is load, not a store outage, and a
		// turn told 503 for it is not what this test is about.
		storeTimeout: "30s",
		mock:         mockprovider.RateLimit{InputTPM: tpm, Quantum: 2 * time.Second}, // see quantumMock
	})
	drain(t, e, tpm, 2)
	if keys := []string{e.mock.Requests()[0].APIKey, e.mock.Requests()[1].APIKey}; keys[0] == keys[1] {
		t.Fatalf("both drain turns went on %s", keys[0])
	}
	base := e.mock.RateCounts()

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	body := turnBody(promptBytes)
	vks := []string{vkLive, vkStd, vkBulk}
	type result struct {
		ok          bool
		rateLimited int // rate_limited answers, each with a Retry-After
		bad         []string
	}
	results := make([]result, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			r := &results[i]
			vk, id := vks[i%3], fmt.Sprintf("many-%d", i)
			for range tries {
				status, typ, retry, err := 0, "", "", error(nil)
				if i%2 == 0 {
					var a rlAnswer
					a, err = e.turn(t, ctx, vk, id, body)
					status, typ, retry = a.status, a.typ, a.retryAfter
				} else {
					status, typ, retry, err = sdkTurn(ctx, e.gk+"/t/"+id+"/anthropic", vk, prompt(promptBytes), i%4 == 1)
				}
				switch {
				case err != nil:
					r.bad = append(r.bad, err.Error())
					return
				case status == http.StatusOK:
					r.ok = true
					return
				case status != http.StatusTooManyRequests || typ != "rate_limited":
					r.bad = append(r.bad, fmt.Sprintf("%d %s", status, typ))
					return
				}
				secs, err := strconv.Atoi(retry)
				if err != nil || secs < 1 {
					r.bad = append(r.bad, "rate_limited with Retry-After "+strconv.Quote(retry))
					return
				}
				r.rateLimited++
				if gkclock.Sleep(ctx, time.Duration(secs)*time.Second) != nil {
					return
				}
			}
		})
	}
	wg.Wait()

	succeeded, limited := 0, 0
	for i, r := range results {
		if len(r.bad) > 0 {
			t.Errorf("client %d got %v", i, r.bad)
		}
		if r.ok {
			succeeded++
		}
		limited += r.rateLimited
	}
	got := e.mock.RateCounts()
	served, refused := got.Served-base.Served, got.Limited-base.Limited
	t.Logf("%d clients succeeded; %d rate_limited answers on the way; the provider served %d turns and refused %d",
		succeeded, limited, served, refused)
	if succeeded != clients {
		t.Errorf("%d of %d clients succeeded", succeeded, clients)
	}
	if float64(refused) > 0.01*float64(served+refused) {
		t.Errorf("the provider refused %d of %d turns, want under 1%%", refused, served+refused)
	}
	if limited == 0 {
		t.Error("no client was ever told rate_limited: the load did not exceed the keys' limits")
	}

	// The same load straight at the provider, on a third key with its
	// minute spent as gatekeeper's keys had theirs: most of it is refused,
	// which is what gatekeeper spared the clients.
	const k3 = "sk-many-key-three"
	if code := directTurn(t, e.mockURL, k3, smallTurn, fmt.Sprintf(`{"usage":{"input_tokens":%d}}`, tpm)); code != http.StatusOK {
		t.Fatalf("spending k3's minute: %d", code)
	}
	var direct atomic.Int64
	var dwg sync.WaitGroup
	for range clients {
		dwg.Go(func() {
			if directTurn(t, e.mockURL, k3, body, "") == http.StatusTooManyRequests {
				direct.Add(1)
			}
		})
	}
	dwg.Wait()
	t.Logf("the same load straight at the provider: %d of %d refused", direct.Load(), clients)
	if direct.Load() < clients/2 {
		t.Errorf("without gatekeeper the provider refused only %d of %d turns; the test's load is too light", direct.Load(), clients)
	}
}

// sdkTurn sends one turn, streamed or not, with the official Anthropic SDK,
// retries off so that every answer is seen, and returns the status, error
// type and Retry-After of an error.
func sdkTurn(ctx context.Context, base, vk, text string, stream bool) (int, string, string, error) {
	c := anthropic.NewClient(aoption.WithBaseURL(base), aoption.WithAPIKey(vk), aoption.WithMaxRetries(0))
	params := anthropic.MessageNewParams{
		Model: "claude-sonnet-4-5", MaxTokens: 16,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))},
	}
	var err error
	if stream {
		s := c.Messages.NewStreaming(ctx, params)
		var m anthropic.Message
		for s.Next() {
			if err = m.Accumulate(s.Current()); err != nil {
				break
			}
		}
		if err == nil {
			err = s.Err()
		}
		s.Close()
		if err == nil && m.StopReason == "" {
			err = errors.New("stream ended without a stop reason")
		}
	} else {
		_, err = c.Messages.New(ctx, params)
	}
	if err == nil {
		return http.StatusOK, "", "", nil
	}
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		return 0, "", "", err
	}
	return apiErr.StatusCode, errorType([]byte(apiErr.RawJSON())), apiErr.Response.Header.Get("Retry-After"), nil
}

// TestRateLimitFairness is the must-show of scheduling: 50 batch clients
// with large turns and 5 interactive clients with small ones against one
// saturated key. Interactive turns wait at least 4× less (p99), and, while
// both classes are backlogged, the tokens served per class follow the
// weights 4:1 within 10%, in the scheduler's unit (estimated input +
// output tokens).
//
// The shares are counted in the scheduler's decisions, not over a span of
// time: the turns served in the rounds of its round-robin during which
// neither class's queue was empty (backlog). On a loaded machine the five
// interactive clients may not keep their queue full (the key is then not
// what limits them, and a share over a time window shows the clients'
// pace, not the scheduler's); the rounds in which both stayed backlogged
// still show the weights. The run goes on until wantBatch such rounds.
func TestRateLimitFairness(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	const (
		tpm = 1_200_000 // 20000 input tokens a second
		// wantBatch rounds with both classes backlogged, each ending with
		// one batch turn: about six seconds on a quiet machine.
		wantBatch = 25
		limit     = 90 * time.Second
	)
	queues := &backlog{length: map[string]int{}, served: map[string]int{}}
	e := newRLEnv(t, rlOpts{
		keys:    fmt.Sprintf(`[{name: k, key: sk-fair-key, input_tpm: %d}]`, tpm),
		maxWait: "60s",
		rates:   queues,
	})
	drain(t, e, tpm, 1)

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var mu sync.Mutex
	waits := map[string][]int64{}
	var wg sync.WaitGroup
	client := func(class, vk string, n, promptBytes int) {
		body := turnBody(promptBytes)
		for i := range n {
			id := fmt.Sprintf("fair-%s-%d", class, i)
			wg.Go(func() {
				for ctx.Err() == nil {
					a, err := e.turn(t, ctx, vk, id, body, "X-Test-Class", class)
					if err != nil {
						return // the test ended
					}
					if a.status != http.StatusOK {
						t.Errorf("%s turn: %d %s", class, a.status, a.body)
						return
					}
					mu.Lock()
					waits[class] = append(waits[class], a.waitMs)
					mu.Unlock()
				}
			})
		}
	}
	client("batch", vkBulk, 50, 4000)     // ~1000 tokens a turn
	client("interactive", vkLive, 5, 800) // ~200 tokens a turn
	start := time.Now()
	for queues.count("batch") < wantBatch && time.Since(start) < limit {
		time.Sleep(50 * time.Millisecond)
	}
	served, rounds := queues.stop()
	cancel()
	wg.Wait()
	if served["batch"] < wantBatch {
		t.Fatalf("%d rounds with both classes backlogged in %s (%d other rounds), want %d: the key was not saturated",
			rounds[0], limit, rounds[1], wantBatch)
	}

	// Every turn of a class costs the same: the scheduler's charge is
	// the input estimate and max_tokens.
	cost := map[string]int64{}
	for _, r := range e.mock.Requests() {
		if class := r.Header.Get("X-Test-Class"); class != "" {
			cost[class] = int64(len(r.Body)+3)/4 + 16
		}
	}
	tokens := map[string]int64{}
	for class, n := range served {
		tokens[class] = int64(n) * cost[class]
	}
	total := float64(tokens["interactive"] + tokens["batch"])
	share := float64(tokens["interactive"]) / total
	p99 := func(class string) float64 {
		w := slices.Clone(waits[class])
		slices.Sort(w)
		if len(w) == 0 {
			return 0
		}
		return float64(w[int(math.Ceil(0.99*float64(len(w))))-1])
	}
	pi, pb := p99("interactive"), p99("batch")
	t.Logf("served in %d rounds with both classes backlogged (%d other rounds), in %s: interactive %d turns (%d tokens), batch %d (%d tokens): interactive share %.3f, want 0.8; p99 wait: interactive %.0f ms, batch %.0f ms (%d and %d turns)",
		rounds[0], rounds[1], time.Since(start).Round(100*time.Millisecond), served["interactive"], tokens["interactive"], served["batch"], tokens["batch"], share,
		pi, pb, len(waits["interactive"]), len(waits["batch"]))
	if math.Abs(share/0.8-1) > 0.10 || math.Abs((1-share)/0.2-1) > 0.10 {
		t.Errorf("interactive share of tokens %.3f, batch %.3f; want 0.8 and 0.2 within 10%%", share, 1-share)
	}
	if len(waits["batch"]) == 0 || pb < 4*pi {
		t.Errorf("p99 wait: interactive %.0f ms, batch %.0f ms; want batch at least 4× interactive", pi, pb)
	}
}

// backlog hears the scheduler's queue lengths, which it reports under its
// lock at every change, in order, and counts the turns served in the
// rounds of the round-robin during which both classes were backlogged. A
// round is taken from one batch turn leaving its queue to the next (one
// round's credit covers about one batch turn); it counts, with that next
// batch turn and the interactive turns served in between, when neither
// queue was empty at any point of it nor of the round before. A class
// whose queue empties in a round takes less than its weight by design
// (the scheduler gives what it leaves to the other): such a round shows
// the clients' pace, not the weights, and is not counted; nor is the
// round after it, in which the class may spend the credit it kept
// (ratelimit.creditGrace).
type backlog struct {
	mu      sync.Mutex
	length  map[string]int
	served  map[string]int // in counted rounds
	rounds  [2]int         // counted and not counted
	inRound int            // interactive turns served in this round
	full    bool           // neither queue was empty in this round
	prev    bool           // nor in the round before
	stopped bool
}

var _ telemetry.RateObserver = (*backlog)(nil)

func (b *backlog) QueueLength(class string, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	prev := b.length[class]
	b.length[class] = n
	if b.stopped {
		return
	}
	switch {
	case class == "interactive" && n < prev:
		b.inRound += prev - n
	case class == "batch" && n < prev:
		if b.full && b.prev {
			b.served["interactive"] += b.inRound
			b.served["batch"] += prev - n
			b.rounds[0]++
		} else {
			b.rounds[1]++
		}
		b.inRound = 0
		b.full, b.prev = true, b.full
	}
	b.full = b.full && b.length["interactive"] > 0 && b.length["batch"] > 0
}

func (b *backlog) Headroom(string, float64) {}

func (b *backlog) count(class string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.served[class]
}

// stop ends the count (the clients leaving their queues are not served)
// and returns it, with the rounds counted and not counted.
func (b *backlog) stop() (served map[string]int, rounds [2]int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	return maps.Clone(b.served), b.rounds
}

// TestRateLimitReplicasShareKey is the must-show of shared limits: two
// gatekeepers, each with its own Redis client, store and scheduler on one
// Redis (as serve wires them), in front of one provider key. Their
// combined rate, counted at the provider once the key is saturated, is
// the key's limit within 5%.
//
// The rate is measured from turn to turn, not over a span of time: the
// slope of the count of turns that reached the provider in the measured
// window over their arrival times (least squares), times a turn's tokens.
// A window's edges fall anywhere between two turns, and on a loaded
// machine a snapshot of the counts may be taken late, or a turn reach the
// provider late; the slope carries neither edge error and spreads one
// late turn over all of them. The turns are large (~1000 tokens, ten a second), so
// that a loaded machine still saturates the key: forty clients of
// ~100-token turns had to make a hundred turns a second through two
// race-instrumented gatekeepers, and squeezed onto one busy core they
// made a fifth of that.
func TestRateLimitReplicasShareKey(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	const (
		tpm     = 600_000 // 10000 input tokens a second: ~10 turns of ~1000 tokens
		perRate = float64(tpm) / 60
		window  = 3 * time.Second
	)
	srv := redistest.StartServer(t)
	mock := mockprovider.New(mockprovider.Options{RateLimit: mockprovider.RateLimit{InputTPM: tpm}, MaxRecords: 100000})
	var replicas []*rlEnv
	var mockURL string
	for i := range 2 {
		opt, err := goredis.ParseURL(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		client := goredis.NewClient(opt)
		t.Cleanup(func() { _ = client.Close() })
		st, err := redisstore.Open(context.Background(), redisstore.Options{Client: client})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		o := rlOpts{keys: fmt.Sprintf(`[{name: k, key: sk-shared-key, input_tpm: %d}]`, tpm), maxWait: "30s",
			buckets: ratelimit.NewRedis(client, "gk:"), mockURL: mockURL, store: st}
		if i == 0 {
			ts := startMock(t, mock)
			o.mockURL, mockURL = ts, ts
		}
		replicas = append(replicas, newRLEnv(t, o))
	}
	replicas[0].mock = mock
	drain(t, replicas[0], tpm, 1)
	base := mock.RateCounts()

	ctx, cancel := context.WithCancel(ctxT(t))
	var wg sync.WaitGroup
	body := turnBody(4000)
	var perReplica [2]atomic.Int64
	for i := range 40 {
		r := i % 2
		wg.Go(func() {
			id := fmt.Sprintf("shared-%d", i)
			for ctx.Err() == nil {
				a, err := replicas[r].turn(t, ctx, vkStd, id, body, "X-Test-Load", "shared")
				if err != nil {
					return
				}
				if a.status != http.StatusOK {
					t.Errorf("replica %d: %d %s", r, a.status, a.body)
					return
				}
				perReplica[r].Add(1)
			}
		})
	}
	time.Sleep(time.Second) // the queues fill
	t1 := time.Now()
	time.Sleep(window)
	t2 := time.Now()
	cancel()
	wg.Wait()
	c2 := mock.RateCounts()

	// The mock stamps a turn with time.Now as it arrives, and every load
	// turn has the same input tokens.
	var at []time.Time
	for _, r := range mock.Requests() {
		if r.Header.Get("X-Test-Load") != "" && r.Status == http.StatusOK && !r.Started.Before(t1) && !r.Started.After(t2) {
			at = append(at, r.Started)
		}
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	if len(at) < 2 {
		t.Fatalf("%d turns reached the provider in the %s window", len(at), window)
	}
	perTurn := float64(c2.InputTokens-base.InputTokens) / float64(c2.Served-base.Served)
	rate := perTurn * turnsPerSecond(at)
	t.Logf("combined rate %.0f input tokens/s for a limit of %.0f (%.3f), over %d turns of %.0f tokens in %s; turns per replica %d and %d; provider refusals %d",
		rate, perRate, rate/perRate, len(at), perTurn, at[len(at)-1].Sub(at[0]).Round(time.Millisecond),
		perReplica[0].Load(), perReplica[1].Load(), c2.Limited-base.Limited)
	if rate > 1.05*perRate || rate < 0.95*perRate {
		t.Errorf("combined rate %.0f tokens/s, want %.0f within 5%%", rate, perRate)
	}
	for r := range 2 {
		if n := perReplica[r].Load(); n < (perReplica[0].Load()+perReplica[1].Load())/5 {
			t.Errorf("replica %d served %d turns: both replicas must be drawing on the key", r, n)
		}
	}
	if refused := c2.Limited - base.Limited; float64(refused) > 0.01*float64(c2.Served-base.Served) {
		t.Errorf("the provider refused %d turns", refused)
	}
}

// turnsPerSecond is the least-squares slope of the count of turns over
// their sorted arrival times at.
func turnsPerSecond(at []time.Time) float64 {
	n := float64(len(at))
	var mt, mi float64
	for i, a := range at {
		mt += a.Sub(at[0]).Seconds() / n
		mi += float64(i) / n
	}
	var cov, vt float64
	for i, a := range at {
		dt := a.Sub(at[0]).Seconds() - mt
		cov += dt * (float64(i) - mi)
		vt += dt * dt
	}
	return cov / vt
}
