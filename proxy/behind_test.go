package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/config"
	"gatekeeper/internal/redistest"
	"gatekeeper/proxy"
	"gatekeeper/ratelimit"
	redisstore "gatekeeper/store/redis"
	"gatekeeper/trajectory"
)

// behindEnv is gatekeeper on Redis with settles written behind replies
// for window, its round trips counted, and a second store on the same
// Redis (its own client and cache) to read what Redis holds.
type behindEnv struct {
	gk     string
	px     *proxy.Server
	rt     *redistest.RoundTrips
	reader *redisstore.Store
	// With key limits: the buckets, on the counted client, and the key.
	buckets *ratelimit.Redis
	key     ratelimit.Key
}

// keyFields is limits as more fields of a key's flow mapping.
func keyFields(limits string) string {
	if limits == "" {
		return ""
	}
	return ", " + limits
}

// keyLimits are a configured key's limits as the proxy gives them to the
// scheduler.
func keyLimits(k config.ProviderKey) ratelimit.Limits {
	return ratelimit.Limits{RPM: k.RPM, InputTPM: k.InputTPM, OutputTPM: k.OutputTPM,
		RPMBurst: k.RPMBurst, InputBurst: k.InputTPMBurst, OutputBurst: k.OutputTPMBurst}
}

func newBehindEnv(t *testing.T, window time.Duration) *behindEnv {
	return newBehindEnvBudget(t, window, "{turns: 1000, dollars: 100}")
}

func newBehindEnvBudget(t *testing.T, window time.Duration, budget string) *behindEnv {
	t.Helper()
	return newBehindEnvKeys(t, window, budget, "")
}

// newBehindEnvKeys is newBehindEnvBudget with the provider key's limits
// (YAML fields of the key, "" for none) kept in rate-limit buckets on the
// store's Redis client, as cmd/gatekeeper builds them.
func newBehindEnvKeys(t *testing.T, window time.Duration, budget, limits string) *behindEnv {
	t.Helper()
	return newBehindEnvRates(t, window, budget, limits, "")
}

// newBehindEnvRates is newBehindEnvKeys with rate_limits (a YAML flow
// mapping, "" for the defaults).
func newBehindEnvRates(t *testing.T, window time.Duration, budget, limits, rates string) *behindEnv {
	t.Helper()
	if rates == "" {
		rates = "{}"
	}
	_, mockURL := newMock(t, false, nil)
	srv := redistest.StartServer(t)
	var counted *goredis.Client
	open := func(hook goredis.Hook) *redisstore.Store {
		opt, err := goredis.ParseURL(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		client := goredis.NewClient(opt)
		t.Cleanup(func() { _ = client.Close() })
		if hook != nil {
			client.AddHook(hook)
			counted = client
		}
		st, err := redisstore.Open(context.Background(), redisstore.Options{Client: client})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	e := &behindEnv{rt: &redistest.RoundTrips{}}
	st := open(e.rt)
	e.reader = open(nil)
	// A heartbeat far off: no beat or sweep adds round trips to the count.
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
store: {kind: redis, redis_url: %q, heartbeat: 1h, settle_window: %s}
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: %s%s}]}
tenants:
  - {name: team-a, keys: [%s], budget: %s}
rate_limits: %s
`, srv.URL, window, mockURL, antKey, keyFields(limits), vkA, budget, rates)), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// The tenant's run limits take their defaults, kept in Redis as the
	// binary keeps them.
	opts := proxy.Options{Config: cfg, Store: st, Ledger: st.Ledger()}
	if limits != "" {
		e.buckets = ratelimit.NewRedis(counted, "gk:")
		e.key = ratelimit.Key{ID: "anthropic/k", Limits: keyLimits(cfg.Providers[0].Keys[0])}
		opts.Buckets = e.buckets
	}
	e.px, err = proxy.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	e.px.Routes(r)
	gk := httptest.NewServer(r)
	t.Cleanup(func() {
		gk.Close()
		e.close(t) // a second Close changes nothing
	})
	e.gk = gk.URL
	return e
}

func (e *behindEnv) close(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.px.Close(ctx)
}

// turn sends one non-streamed turn on run and returns its record's id.
func (e *behindEnv) turn(t *testing.T, run string) string {
	t.Helper()
	id, status, body := e.try(t, run)
	if status != http.StatusOK {
		t.Fatalf("turn: %d %s", status, body)
	}
	return id
}

// try sends one non-streamed turn on run: its record's id, status and body.
func (e *behindEnv) try(t *testing.T, run string) (string, int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", e.gk+"/t/"+run+"/anthropic/v1/messages", strings.NewReader(anthropicReq(false, "status?")))
	req.Header.Set("x-api-key", vkA)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	return resp.Header.Get("X-Gatekeeper-Trajectory"), resp.StatusCode, body
}

func (e *behindEnv) record(t *testing.T, id string) *trajectory.Record {
	t.Helper()
	rec, err := e.reader.Get(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// An agent's loop on one replica: each turn's settle waits behind its
// reply and rides the thread's next admission, so a turn costs one round
// trip; Close writes the last.
func TestSettleBehindRidesNextAdmission(t *testing.T) {
	e := newBehindEnv(t, 5*time.Second)
	id := e.turn(t, "loop-1")
	rec := e.record(t, id)
	if rec.State != trajectory.CallingModel || rec.Turns != 0 {
		t.Fatalf("after the first reply Redis holds %s with %d turns; want its settle still waiting (CALLING_MODEL, 0)", rec.State, rec.Turns)
	}
	const n = 10
	before := e.rt.Load()
	for i := 2; i <= n; i++ {
		if got := e.turn(t, "loop-1"); got != id {
			t.Fatalf("turn %d went to %s, want %s", i, got, id)
		}
		rec := e.record(t, id)
		if rec.Turns != int64(i-1) || rec.State != trajectory.CallingModel {
			t.Fatalf("after turn %d Redis holds %d turns, %s; want %d settled and the last waiting", i, rec.Turns, rec.State, i-1)
		}
	}
	if got := e.rt.Load() - before; got != n-1 {
		t.Errorf("turns 2..%d cost %d round trips, want %d (one each)", n, got, n-1)
	}
	e.close(t)
	rec = e.record(t, id)
	if rec.Turns != n || rec.State != trajectory.Ready || rec.Reserved != (trajectory.Reservation{}) || rec.Call != "" {
		t.Fatalf("after Close: %d turns, %s, reserved %+v, call %q; want %d turns settled, READY, nothing reserved",
			rec.Turns, rec.State, rec.Reserved, rec.Call, n)
	}
	evs, err := e.reader.Events(ctxT(t), rec.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, ev := range evs {
		if ev.Type == trajectory.EventTurn {
			calls[callOf(t, ev)]++
		}
	}
	if len(calls) != n {
		t.Errorf("%d calls have a turn event, want %d: %v", len(calls), n, calls)
	}
	for c, k := range calls {
		if k != 1 {
			t.Errorf("call %s has %d turn events, want 1", c, k)
		}
	}
}

// A settle no admission takes is written once its window has passed:
// the turn costs its admission and the flush's write.
func TestSettleBehindFlushesAfterWindow(t *testing.T) {
	e := newBehindEnv(t, 20*time.Millisecond)
	settled := func(id string, turns int64) func() bool {
		return func() bool {
			rec := e.record(t, id)
			return rec.State == trajectory.Ready && rec.Turns == turns && rec.Reserved == (trajectory.Reservation{})
		}
	}
	id := e.turn(t, "once-1")
	waitFor(t, "the first settle to be flushed", settled(id, 1))
	before := e.rt.Load()
	e.turn(t, "once-1")
	waitFor(t, "the second settle to be flushed", settled(id, 2))
	if got := e.rt.Load() - before; got != 2 {
		t.Errorf("a turn whose settle no admission took cost %d round trips, want 2", got)
	}
}

// callOf is the call id a turn event names.
func callOf(t *testing.T, ev trajectory.Event) string {
	t.Helper()
	var d struct {
		Call string `json:"call"`
	}
	if err := json.Unmarshal(ev.Data, &d); err != nil || d.Call == "" {
		t.Fatalf("turn event without a call id: %s", ev.Data)
	}
	return d.Call
}

// An admission that refuses the call still saves the settle it carries:
// the run's one allowed turn is charged, once, when the second is refused
// for the budget.
func TestSettleBehindRefusedAdmissionCharges(t *testing.T) {
	e := newBehindEnvBudget(t, 5*time.Second, "{turns: 1}")
	id := e.turn(t, "refused-1")
	if _, status, body := e.try(t, "refused-1"); status != http.StatusPaymentRequired {
		t.Fatalf("second turn: %d %s, want 402", status, body)
	}
	rec := e.record(t, id)
	if rec.Turns != 1 || rec.State != trajectory.Failed || rec.Reserved != (trajectory.Reservation{}) || rec.Spend.Dollars <= 0 {
		t.Fatalf("after the refusal: %d turns, %s, reserved %+v, spend %+v; want the first turn charged, the run FAILED, nothing reserved",
			rec.Turns, rec.State, rec.Reserved, rec.Spend)
	}
	evs, err := e.reader.Events(ctxT(t), rec.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.Type == trajectory.EventTurn {
			n++
		}
	}
	e.close(t)
	if n != 1 {
		t.Fatalf("%d turn events, want 1", n)
	}
	if again := e.record(t, id); again.Turns != 1 || again.Spend != rec.Spend {
		t.Fatalf("Close changed the record: %d turns, spend %+v; want it as it was", again.Turns, again.Spend)
	}
}

// On Redis with key limits, the key take rides in the admission's round
// trip: an agent's loop still costs one round trip a turn (the key
// settles wait behind the replies, for the flush), and every turn is
// taken from the key.
func TestKeyTakeRidesAdmission(t *testing.T) {
	e := newBehindEnvKeys(t, 5*time.Second, "{turns: 1000, dollars: 100}", "rpm: 600")
	id := e.turn(t, "keyed-1")
	e.turn(t, "keyed-1") // the take script is loaded by then, whatever the first found
	const n = 10
	before := e.rt.Load()
	for i := 3; i <= n; i++ {
		if got := e.turn(t, "keyed-1"); got != id {
			t.Fatalf("turn %d went to %s, want %s", i, got, id)
		}
	}
	if got := e.rt.Load() - before; got != n-2 {
		t.Errorf("turns 3..%d cost %d round trips, want %d (one each)", n, got, n-2)
	}
	// rpm 600 holds a burst of 10 requests: the n turns took all of it
	// (their settles, which correct only tokens here, are still waiting).
	if h, err := e.buckets.Headroom(ctxT(t), e.key); err != nil || h > 0.1 {
		t.Errorf("key headroom %.3f (%v) after %d turns on a burst of 10, want about 0: the turns were not taken from the key", h, err, n)
	}
}

// A turn the admission refuses consumes no rate: the take that rode with
// it is given back.
func TestKeyTakeRefusedGivesBack(t *testing.T) {
	e := newBehindEnvKeys(t, 5*time.Second, "{turns: 1}", "rpm: 6, rpm_burst: 2")
	id := e.turn(t, "keyed-refused")
	if h, err := e.buckets.Headroom(ctxT(t), e.key); err != nil || h < 0.45 || h > 0.55 {
		t.Fatalf("key headroom %.3f (%v) after one turn on a burst of 2, want 1/2", h, err)
	}
	// Loads the settle script (a first use costs one more round trip),
	// changing nothing: the key has no input limit.
	if err := e.buckets.Settle(ctxT(t), e.key, ratelimit.Cost{Input: -1}, ratelimit.Unreported()); err != nil {
		t.Fatal(err)
	}
	before := e.rt.Load()
	if _, status, body := e.try(t, "keyed-refused"); status != http.StatusPaymentRequired {
		t.Fatalf("second turn: %d %s, want 402", status, body)
	}
	if got := e.rt.Load() - before; got != 3 {
		t.Errorf("the refused turn cost %d round trips, want 3 (the admission with its take, the give-back, the run's refused event)", got)
	}
	if h, err := e.buckets.Headroom(ctxT(t), e.key); err != nil || h < 0.45 {
		t.Errorf("key headroom %.3f (%v) after the refused turn, want 1/2 still: the refusal consumed rate", h, err)
	}
	if rec := e.record(t, id); rec.State != trajectory.Failed {
		t.Errorf("record %s, want FAILED by its budget", rec.State)
	}
}

// A flush writes its records' settles in one pipeline: Close's flush of
// the settles of eight runs costs one round trip.
func TestSettleBehindFlushOnePipeline(t *testing.T) {
	e := newBehindEnv(t, 5*time.Second)
	const n = 8
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.turn(t, fmt.Sprintf("flush-%d", i))
	}
	before := e.rt.Load()
	e.close(t)
	if got := e.rt.Load() - before; got != 1 {
		t.Errorf("the flush of %d records' settles cost %d round trips, want 1", n, got)
	}
	for _, id := range ids {
		if rec := e.record(t, id); rec.Turns != 1 || rec.State != trajectory.Ready || rec.Reserved != (trajectory.Reservation{}) {
			t.Errorf("%s after Close: %d turns, %s, reserved %+v; want its turn settled", id, rec.Turns, rec.State, rec.Reserved)
		}
	}
}
