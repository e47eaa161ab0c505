package keys

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/config"
	"gatekeeper/ratelimit"
	"gatekeeper/trajectory"
)

func provider(api string, rpm int, names ...string) *config.Provider {
	p := &config.Provider{Name: "prov", API: api}
	for _, n := range names {
		p.Keys = append(p.Keys, config.ProviderKey{Name: n, Key: "sk-" + n, RPM: rpm, RPMBurst: rpm})
	}
	return p
}

func TestPoolPickAndSetKey(t *testing.T) {
	p := NewPool(provider(config.APIAnthropic, 0, "a", "b", "c"))
	if p.Limited() {
		t.Fatal("a pool without limits is limited")
	}
	var got []string
	for range 4 {
		got = append(got, p.Pick())
	}
	if want := "sk-a sk-b sk-c sk-a"; strings.Join(got, " ") != want {
		t.Errorf("picks %v, want %s", got, want)
	}
	if s := p.Secret("prov/b"); s != "sk-b" {
		t.Errorf("Secret(prov/b) = %q", s)
	}
	h := http.Header{}
	p.SetKey(h, "sk-b")
	if h.Get("X-Api-Key") != "sk-b" || h.Get("Authorization") != "" {
		t.Errorf("anthropic key header: %v", h)
	}

	op := provider(config.APIOpenAI, 5, "x")
	op.Keys[0].Organization = "org-1"
	o := NewPool(op)
	if !o.Limited() {
		t.Error("a pool with an rpm is not limited")
	}
	h = http.Header{}
	o.SetKey(h, "sk-x")
	if h.Get("Authorization") != "Bearer sk-x" || h.Get("OpenAI-Organization") != "org-1" {
		t.Errorf("openai key headers: %v", h)
	}
}

func TestUsed(t *testing.T) {
	u := trajectory.Usage{InputTokens: 100, CachedInputTokens: 50, CacheWriteTokens: 20, OutputTokens: 7}
	tests := []struct {
		name    string
		refused bool
		want    ratelimit.Cost
	}{
		{"answered: input and cache writes, not cache reads", false, ratelimit.Cost{Requests: 1, Input: 120, Output: 7}},
		{"refused: one request", true, ratelimit.Cost{Requests: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Used(tc.refused, u); got != tc.want {
				t.Errorf("Used = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestUnscheduled: without a scheduler, or on a pool without limits, a
// call waits for nothing, holds no grant and goes on the pool's keys in
// turn.
func TestUnscheduled(t *testing.T) {
	limited := NewPool(provider(config.APIAnthropic, 5, "a", "b"))
	free := NewPool(provider(config.APIAnthropic, 0, "a", "b"))
	s := newScheduler(t, nil, limited, free)
	for name, kt := range map[string]*Turn{"no scheduler": (*Scheduler)(nil).Turn(limited, "standard"), "no limits": s.Turn(free, "standard")} {
		t.Run(name, func(t *testing.T) {
			kt.Ride(10, 10)
			if kt.Riding() != nil {
				t.Error("a ride was prepared")
			}
			if err := kt.Acquire(context.Background(), 10, 10, nil); err != nil {
				t.Fatal(err)
			}
			if err := kt.AcquireOne(context.Background()); err != nil {
				t.Fatal(err)
			}
			if kt.Grant() != nil || kt.Settlement(ratelimit.Cost{Requests: 1}).Grant != nil {
				t.Error("a grant without limits")
			}
			if a, b := kt.Key(), kt.Key(); a == b {
				t.Errorf("keys %s, %s: want the pool's keys in turn", a, b)
			}
		})
	}
}

type observer struct {
	mu      sync.Mutex
	limited []string
	retried []string
}

func (o *observer) QueueLength(string, int)         {}
func (o *observer) QueueWait(string, time.Duration) {}
func (o *observer) Headroom(string, float64)        {}
func (o *observer) RateLimited(class string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.limited = append(o.limited, class)
}
func (o *observer) KeyRetried(p string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retried = append(o.retried, p)
}

func newScheduler(t *testing.T, obs Observer, pools ...*Pool) *Scheduler {
	t.Helper()
	s := NewScheduler(Options{Pools: pools, RateLimits: config.RateLimits{MaxWait: config.Duration(20 * time.Millisecond), DefaultOutputTokens: 100},
		Clock: time.Now, Logger: slog.New(slog.DiscardHandler), Observer: obs})
	if s == nil {
		t.Fatal("no scheduler for a limited pool")
	}
	t.Cleanup(s.Close)
	return s
}

func TestNoSchedulerWithoutLimits(t *testing.T) {
	if s := NewScheduler(Options{Pools: []*Pool{NewPool(provider(config.APIAnthropic, 0, "a"))}}); s != nil {
		t.Error("a scheduler for pools without limits")
	}
}

// TestAcquireRefusal: a call that finds no room in its wait is refused
// with a 429 naming the provider, a Retry-After of at least a second and
// the time waited in the agent's headers; the metric counts its class.
func TestAcquireRefusal(t *testing.T) {
	obs := &observer{}
	pool := NewPool(provider(config.APIAnthropic, 1, "a"))
	s := newScheduler(t, obs, pool)
	first := s.Turn(pool, "standard")
	if err := first.Acquire(context.Background(), 10, 0, nil); err != nil {
		t.Fatal(err)
	}
	if first.Grant() == nil || first.Key() != "sk-a" {
		t.Fatalf("grant %v, key %q", first.Grant(), first.Key())
	}
	for name, acquire := range map[string]func(*Turn, http.Header) error{
		"turn":         func(kt *Turn, h http.Header) error { return kt.Acquire(context.Background(), 10, 0, h) },
		"pass-through": func(kt *Turn, h http.Header) error { return kt.AcquireOne(context.Background()) },
	} {
		t.Run(name, func(t *testing.T) {
			h := http.Header{}
			err := acquire(s.Turn(pool, "standard"), h)
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("error %v, want a *Refusal", err)
			}
			var we *ratelimit.WaitError
			if r.Status != http.StatusTooManyRequests || r.RetryAfter < time.Second || !strings.Contains(r.Msg, "provider prov has no key capacity") || !errors.As(err, &we) {
				t.Errorf("refusal %+v", r)
			}
			if name == "turn" && h.Get(HeaderQueueWait) == "" {
				t.Error("no queue wait header")
			}
		})
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.limited) != 2 || obs.limited[0] != "standard" {
		t.Errorf("rate_limited counted %v, want standard twice", obs.limited)
	}
}

// TestLeave: a settle that rides elsewhere takes the grant out of the
// call once; the call's own settle then sends nothing again.
func TestLeave(t *testing.T) {
	pool := NewPool(provider(config.APIAnthropic, 10, "a"))
	s := newScheduler(t, nil, pool)
	kt := s.Turn(pool, "standard")
	if err := kt.Acquire(context.Background(), 10, 0, nil); err != nil {
		t.Fatal(err)
	}
	kt.KeepHeader(http.Header{"X-Test": {"1"}})
	used := ratelimit.Cost{Requests: 1, Input: 4}
	st := kt.Leave(used)
	if st.Grant == nil || st.Actual != used || st.Header.Get("X-Test") != "1" {
		t.Fatalf("first Leave = %+v", st)
	}
	if again := kt.Leave(used); again.Grant != nil {
		t.Error("the grant left twice")
	}
	if kt.Grant() != nil {
		t.Error("the call still holds the grant")
	}
	kt.Settle(context.Background(), used) // nothing left to settle: no panic, no second settle
}

// TestTransportMovesRefusedCall runs a real provider that refuses one key
// with a 429: the call goes again on the other key, with its body from
// the start, and the metric counts the move.
func TestTransportMovesRefusedCall(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Header.Get("X-Api-Key")+":"+string(b))
		mu.Unlock()
		if r.Header.Get("X-Api-Key") == "sk-a" {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("X-Ratelimit-Remaining-Requests", "9")
		_, _ = w.Write([]byte("ok"))
	}))
	defer upstream.Close()

	obs := &observer{}
	pool := NewPool(provider(config.APIAnthropic, 10, "a", "b"))
	s := newScheduler(t, obs, pool)
	body := []byte(`{"n":1}`)
	for attempt := 0; attempt < 20; attempt++ {
		kt := s.Turn(pool, "standard")
		if err := kt.Acquire(context.Background(), 1, 1, nil); err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, upstream.URL+"/v1/messages", strings.NewReader(string(body)))
		pool.SetKey(req.Header, kt.Key())
		first := kt.Key()
		resp, err := kt.Transport(http.DefaultTransport, slog.New(slog.DiscardHandler), body).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(got) != "ok" || kt.Key() != "sk-b" {
			t.Fatalf("status %d %q on key %s, want 200 on sk-b", resp.StatusCode, got, kt.Key())
		}
		if kt.Settlement(ratelimit.Cost{Requests: 1}).Header.Get("X-Ratelimit-Remaining-Requests") != "9" {
			t.Error("the reply's headers were not kept for the settle")
		}
		kt.Settle(context.Background(), ratelimit.Cost{Requests: 1})
		if first == "sk-a" {
			mu.Lock()
			defer mu.Unlock()
			if len(seen) < 2 || seen[len(seen)-2] != `sk-a:{"n":1}` || seen[len(seen)-1] != `sk-b:{"n":1}` {
				t.Errorf("provider saw %v, want sk-a then sk-b with the whole body", seen)
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if len(obs.retried) != 1 || obs.retried[0] != "prov" {
				t.Errorf("key retries counted %v", obs.retried)
			}
			return
		}
	}
	t.Fatal("the scheduler never placed a call on sk-a")
}

// TestAcquireBucketsUnreadable: when the shared buckets cannot be read
// (Redis down; here nothing listens on its port) a call is not sent past
// the limits: it is refused with a 503 that asks for a retry.
func TestAcquireBucketsUnreadable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	client := goredis.NewClient(&goredis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer client.Close()
	pool := NewPool(provider(config.APIAnthropic, 5, "a"))
	s := NewScheduler(Options{Pools: []*Pool{pool}, Buckets: ratelimit.NewRedis(client, "gk:"), StoreTimeout: time.Second,
		RateLimits: config.RateLimits{MaxWait: config.Duration(time.Second)}, Logger: slog.New(slog.DiscardHandler)})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = s.Turn(pool, "standard").Acquire(ctx, 10, 10, nil)
	var r *Refusal
	if !errors.As(err, &r) || r.Status != http.StatusServiceUnavailable || r.RetryAfter != 5*time.Second ||
		r.Msg != "gatekeeper could not check provider prov's rate limits; retry later" || !strings.Contains(r.Error(), r.Msg) {
		t.Fatalf("error %v, want the 503 refusal", err)
	}
}
