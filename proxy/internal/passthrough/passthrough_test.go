package passthrough

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/keys"
	"gatekeeper/proxy/internal/threadid"
	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

var discard = slog.New(slog.DiscardHandler)

func pool(api string) *keys.Pool {
	return keys.NewPool(&config.Provider{Name: "prov", API: api, Keys: []config.ProviderKey{{Name: "a", Key: "sk-a"}, {Name: "b", Key: "sk-b"}}})
}

func TestProviderHeader(t *testing.T) {
	tests := []struct {
		name   string
		in     http.Header
		traced bool
		wantUA []string
	}{
		{"agent's key and gatekeeper's headers dropped, no user agent", http.Header{
			"X-Api-Key": {"gk-virtual"}, "Cookie": {"c=1"}, "X-Gatekeeper-Trajectory": {"run"}, "Accept-Encoding": {"gzip"}}, false, nil},
		{"user agent kept, trace added", http.Header{"User-Agent": {"claude-cli/1.0"}, "Accept-Encoding": {"br"}}, true, []string{"claude-cli/1.0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.in.Clone()
			var trace func(http.Header)
			if tc.traced {
				trace = func(h http.Header) { h.Set("Traceparent", "00-abc") }
			}
			ProviderHeader(h, pool(config.APIAnthropic), "sk-b", trace)
			if h.Get("X-Api-Key") != "sk-b" || h.Get("Cookie") != "" || h.Get("X-Gatekeeper-Trajectory") != "" {
				t.Errorf("headers %v: want the provider key only", h)
			}
			if h.Get("Accept-Encoding") != "identity" {
				t.Errorf("Accept-Encoding %q, want identity", h.Get("Accept-Encoding"))
			}
			if ua, ok := h["User-Agent"]; !ok || fmt.Sprint(ua) != fmt.Sprint(tc.wantUA) {
				t.Errorf("User-Agent %v (present %v), want %v", ua, ok, tc.wantUA)
			}
			if got := h.Get("Traceparent") != ""; got != tc.traced {
				t.Errorf("trace context present %v, want %v", got, tc.traced)
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name   string
		ctx    context.Context
		err    error
		status int // 0: ErrClientGone
	}{
		{"agent went away", canceled, context.Canceled, 0},
		{"canceled while the agent waits", context.Background(), context.Canceled, http.StatusBadGateway},
		{"timeout", context.Background(), fmt.Errorf("dial: %w", context.DeadlineExceeded), http.StatusGatewayTimeout},
		{"refused", context.Background(), errors.New("connection refused"), http.StatusBadGateway},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Unreachable(tc.ctx, discard, "prov", tc.err)
			if tc.status == 0 {
				if !errors.Is(err, ErrClientGone) {
					t.Errorf("got %v, want ErrClientGone", err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Status != tc.status || e.RetryAfter != UpstreamRetryAfter ||
				e.Msg != "gatekeeper could not get a reply from provider prov; retry later" || !errors.Is(err, tc.err) ||
				e.Error() != e.Msg+": "+tc.err.Error() {
				t.Errorf("got %#v", err)
			}
		})
	}
}

// frontend serves the pass-through route of a provider at target through
// NewProxy, as the proxy does: each request carries its Request.
func frontend(t *testing.T, target string, p *keys.Pool) (*httptest.Server, *sync.Map) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	seen := &sync.Map{}
	rp := NewProxy(Options{Provider: "prov", Target: u, Pool: p, Transport: http.DefaultTransport, Logger: discard,
		Redact: func(resp *http.Response, _ []string) {
			seen.Store("redacted", resp.StatusCode)
			resp.Body = io.NopCloser(strings.NewReader("redacted"))
			resp.ContentLength = -1
			resp.Header.Del("Content-Length")
		},
		WriteError: func(w http.ResponseWriter, err error) {
			seen.Store("error", err)
			w.WriteHeader(599)
		}})
	kt := (*keys.Scheduler)(nil).Turn(p, "standard")
	fe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := With(r.Context(), &Request{Path: r.URL.EscapedPath(), Keys: kt})
		rp.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(fe.Close)
	return fe, seen
}

// TestProxy runs a provider and the pass-through route in front of it:
// the request reaches the provider below its base path with the query as
// sent and a provider key in place of the agent's; an error reply is
// redacted on its way back.
func TestProxy(t *testing.T) {
	var mu sync.Mutex
	var got []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.RequestURI()+" "+r.Header.Get("X-Api-Key")+" "+r.Header.Get("Accept-Encoding"))
		mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/secret") {
			http.Error(w, `{"error":"bad key sk-a"}`, http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, `{"data":[]}`)
	}))
	defer upstream.Close()
	fe, seen := frontend(t, upstream.URL+"/base/", pool(config.APIAnthropic))

	req, _ := http.NewRequest(http.MethodGet, fe.URL+"/v1/models?limit=5", nil)
	req.Header.Set("X-Api-Key", "gk-virtual")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != `{"data":[]}` {
		t.Fatalf("reply %d %q", resp.StatusCode, b)
	}
	resp, err = http.Get(fe.URL + "/v1/secret")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || string(b) != "redacted" {
		t.Errorf("error reply %d %q, want the redacted 401", resp.StatusCode, b)
	}
	if v, ok := seen.Load("redacted"); !ok || v != http.StatusUnauthorized {
		t.Errorf("redact saw %v", v)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"/base/v1/models?limit=5 sk-a identity", "/base/v1/secret sk-b identity"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("provider saw %q, want %q", got, want)
	}
}

// TestProxyUnreachable: a provider nobody listens for is answered through
// WriteError with a 502.
func TestProxyUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	fe, seen := frontend(t, "http://"+addr, pool(config.APIOpenAI))
	resp, err := http.Get(fe.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	v, _ := seen.Load("error")
	var e *Error
	if resp.StatusCode != 599 || !errors.As(v.(error), &e) || e.Status != http.StatusBadGateway {
		t.Errorf("status %d, error %v; want WriteError with a 502", resp.StatusCode, v)
	}
}

func TestBlocking(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	store := memory.New(memory.Options{Clock: func() time.Time { return now }})
	create := func(id, tenant, parent string, state trajectory.State) {
		rec := trajectory.New(id, tenant, now)
		rec.ParentID, rec.State = parent, state
		if err := store.Create(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	create("live", "team-a", "", trajectory.Ready)
	create("done", "team-a", "", trajectory.Completed)
	create("held", "team-a", "", trajectory.Paused)
	create("theirs", "team-b", "", trajectory.Completed)
	create(threadid.Child("live", "agent:sub"), "team-a", "live", trajectory.Paused)
	create(threadid.Child("done", "agent:sub"), "team-a", "done", trajectory.Ready)

	sub := http.Header{"X-Claude-Code-Agent-Id": {"sub"}}
	tests := []struct {
		name, root string
		h          http.Header
		want       string // the blocking record; "" for none
	}{
		{"live run", "live", nil, ""},
		{"ended run", "done", nil, "done"},
		{"paused run", "held", nil, "held"},
		{"not created yet", "new", nil, ""},
		{"another tenant's", "theirs", nil, ""},
		{"paused subagent of a live run", "live", sub, threadid.Child("live", "agent:sub")},
		{"live subagent of an ended run", "done", sub, "done"},
		{"subagent that never ran", "held", sub, "held"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := Blocking(ctx, store, tc.root, "team-a", tc.h)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if rec != nil {
				got = rec.ID
			}
			if got != tc.want {
				t.Errorf("blocking %q, want %q", got, tc.want)
			}
		})
	}
}
