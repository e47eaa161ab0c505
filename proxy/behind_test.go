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
}

func newBehindEnv(t *testing.T, window time.Duration) *behindEnv {
	return newBehindEnvBudget(t, window, "{turns: 1000, dollars: 100}")
}

func newBehindEnvBudget(t *testing.T, window time.Duration, budget string) *behindEnv {
	t.Helper()
	_, mockURL := newMock(t, false, nil)
	srv := redistest.StartServer(t)
	open := func(hook goredis.Hook) *redisstore.Store {
		opt, err := goredis.ParseURL(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		client := goredis.NewClient(opt)
		t.Cleanup(func() { _ = client.Close() })
		if hook != nil {
			client.AddHook(hook)
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
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: %s}]}
tenants:
  - {name: team-a, keys: [%s], budget: %s}
`, srv.URL, window, mockURL, antKey, vkA, budget)), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	e.px, err = proxy.New(proxy.Options{Config: cfg, Store: st})
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
