package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/admin"
	"gatekeeper/config"
	"gatekeeper/internal/redistest"
	"gatekeeper/mockprovider"
	"gatekeeper/proxy"
	"gatekeeper/ratelimit"
	"gatekeeper/store/memory"
	redisstore "gatekeeper/store/redis"
	"gatekeeper/trajectory"
)

// Secrets of the benchmark's config: loopback only, never real.
const (
	virtualKey  = "vk-loadbench-0123456789"
	upstreamKey = "sk-ant-loadbench-upstream-0123"
	adminToken  = "loadbench-admin-token-0123456789"
)

// headerBenchID names each stream so its record at the mock can be found.
const headerBenchID = "X-Bench-Id"

// Indexes of bench.targets.
const (
	bareIdx = 0
	gkIdx   = 1
)

// target is one proxy in front of the mock.
type target struct {
	name       string
	url        string
	gatekeeper bool
}

// bench is everything one run starts: the mock, the two proxies, and the
// client driving them.
type bench struct {
	p       params
	mock    *mockprovider.Server
	gate    *gate
	store   trajectory.Store
	redis   goredis.UniversalClient // with -redis: the store's and the key buckets' client
	rtt     *redistest.RoundTrips   // its round trips
	px      *proxy.Server
	client  *http.Client
	targets [2]target

	// transports whose idle connections are closed before each heap
	// sample, so pooled connections of an earlier phase do not count.
	transports []*http.Transport

	servers []*http.Server // front first, the order they are shut down in
	served  chan error     // one value per server when its Serve returns
}

// start brings up the mock, the bare proxy and gatekeeper on loopback.
func start(p params, stderr io.Writer) (*bench, error) {
	b := &bench{p: p, gate: &gate{}, served: make(chan error, 3)}
	// Clock stays time.Now: EventTimes are compared with the client's reads.
	// The mock advertises the key's own limits (see roomyLimits).
	b.mock = mockprovider.New(mockprovider.Options{Keys: []string{upstreamKey}, Sleep: b.gate.sleep,
		RequestsPerMinute: benchRPM, TokensPerMinute: benchTPM})
	mockURL, err := b.serve(b.mock)
	if err != nil {
		return nil, err
	}
	mu, err := url.Parse(mockURL)
	if err != nil {
		return nil, errors.Join(err, b.close())
	}

	bareT, gkT := upstreamTransport(), upstreamTransport()
	clientT := clientTransport(max(p.conns, p.streams))
	b.transports = []*http.Transport{clientT, bareT, gkT}
	b.client = &http.Client{Transport: clientT}

	bare := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(mu)
			pr.Out.Header.Set("X-Api-Key", upstreamKey)
		},
		Transport:     bareT,
		FlushInterval: -1,
		ErrorLog:      log.New(stderr, "loadbench: bare proxy: ", 0),
	}
	gk, err := b.gatekeeper(mockURL, gkT)
	if err != nil {
		return nil, errors.Join(err, b.close())
	}
	bareURL, err := b.serve(fullDuplex(bare))
	if err != nil {
		return nil, errors.Join(err, b.close())
	}
	gkURL, err := b.serve(gk)
	if err != nil {
		return nil, errors.Join(err, b.close())
	}
	b.targets = [2]target{bareIdx: {name: "bare", url: bareURL}, gkIdx: {name: "gatekeeper", url: gkURL, gatekeeper: true}}
	return b, nil
}

// gatekeeper builds the proxy the way its own tests do: config parsed from
// YAML, agent and admin routes on one chi router. On the memory store the
// tenant has no budget, so that thousands of turns on one trajectory are
// admitted. On Redis (-redis) it is the whole path a replica runs: a budget
// far above what a run spends, key limits far above what the mock gets
// (10M requests a minute; none with -key-limits=false), kept in Redis as
// replicas share them, with the mock's rate-limit headers as a provider
// with room sends them (roomyLimits), and the round trips counted.
func (b *bench) gatekeeper(mockURL string, tr http.RoundTripper) (http.Handler, error) {
	store, budget, limits := "", "", ""
	if b.p.redisURL != "" {
		store = fmt.Sprintf("store: {kind: redis, redis_url: %q, settle_window: %s}", b.p.redisURL, b.p.settleWindow)
		budget = "budget: {turns: 1000000000, dollars: 10000000}"
		if b.p.keyLimits {
			limits = fmt.Sprintf(", rpm: %d, input_tpm: %d, output_tpm: %[2]d", benchRPM, benchTPM)
		}
	}
	yaml := fmt.Sprintf(`
listen: 127.0.0.1:0
%s
providers:
  - name: anthropic
    api: anthropic
    base_url: %s
    default: true
    keys: [{name: k1, key: %s%s}]
tenants:
  - name: bench
    keys: [%s]
    %s
admin:
  tokens:
    - {name: bench, token: %s, roles: [operator]}
watchdog: {enabled: %t}
`, store, mockURL, upstreamKey, limits, virtualKey, budget, adminToken, b.p.watchdog)
	cfg, err := config.Parse([]byte(yaml), func(string) string { return "" })
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if b.p.redisURL != "" {
		tr = roomyLimits{tr}
	}
	opts := proxy.Options{Config: cfg, Transport: tr}
	if b.p.redisURL != "" {
		client, err := redisstore.NewClient(b.p.redisURL)
		if err != nil {
			return nil, err
		}
		b.redis, b.rtt = client, &redistest.RoundTrips{}
		client.AddHook(b.rtt)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := redisstore.Open(ctx, redisstore.Options{Client: client})
		if err != nil {
			return nil, err
		}
		b.store = st
		opts.Buckets = ratelimit.NewRedis(client, "loadbench:")
	} else {
		b.store = memory.New(memory.Options{})
	}
	opts.Store = b.store
	px, err := proxy.New(opts)
	if err != nil {
		return nil, err
	}
	b.px = px
	r := chi.NewRouter()
	admin.New(cfg, b.store, nil, nil).Routes(r)
	px.Routes(r)
	return r, nil
}

// fullDuplex lets the bare proxy's transport finish reading the request
// body after the reply has begun, as gatekeeper does (proxy/turn.go). An
// HTTP/1 server otherwise drains and closes the body when the response
// header goes out; a transport still sending that body then fails its
// write and closes the upstream connection, cutting the stream
// (golang/go#40747). Without it a few streams in every run were cut.
func fullDuplex(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex() // HTTP/1 servers always support it
		h.ServeHTTP(w, r)
	})
}

// upstreamTransport has the settings of gatekeeper's own upstream
// transport (proxy.newTransport), so the bare proxy pools connections to
// the mock the same way; gatekeeper gets its own instance of it only so
// that its idle connections can be closed before a heap sample.
//
// Compression is off: the client asks for none, and gatekeeper asks the
// provider for identity on turns, while a default Transport would add
// "Accept-Encoding: gzip" on the bare proxy's behalf and have the mock
// gzip (and the proxy gunzip) every reply; that made the bare proxy
// several times slower than gatekeeper.
func upstreamTransport() *http.Transport {
	return &http.Transport{
		DisableCompression:    true,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// clientTransport keeps one connection per worker or stream alive, so the
// client does not measure its own connection churn.
func clientTransport(conns int) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConns:        2 * conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// serve listens on a loopback port chosen by the system.
func (b *bench) serve(h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	b.servers = append([]*http.Server{srv}, b.servers...)
	go func() { b.served <- srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), nil
}

// close stops every server, front first, and waits for each Serve to
// return.
func (b *bench) close() error {
	var errs []error
	for _, tr := range b.transports {
		tr.CloseIdleConnections()
	}
	for _, srv := range b.servers {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs = append(errs, srv.Shutdown(ctx))
		cancel()
		// Shutdown leaves the proxies' upstream connections idle only now.
		for _, tr := range b.transports {
			tr.CloseIdleConnections()
		}
	}
	for range b.servers {
		if err := <-b.served; !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	b.servers = nil
	if b.px != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		b.px.Close(ctx)
		cancel()
	}
	if b.store != nil {
		errs = append(errs, b.store.Close())
	}
	if b.redis != nil {
		errs = append(errs, b.redis.Close())
	}
	return errors.Join(errs...)
}

// turnRequest is a small Anthropic Messages request. The same bytes go to
// both targets; the bare proxy passes the trajectory header on to the mock,
// which ignores it.
func (b *bench) turnRequest(ctx context.Context, tg target, body []byte, trajectory, turn string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tg.url+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	h := req.Header
	h.Set("X-Api-Key", virtualKey)
	h.Set("Anthropic-Version", "2023-06-01")
	h.Set("Content-Type", "application/json")
	h.Set("X-Gatekeeper-Trajectory", trajectory)
	h.Set(mockprovider.HeaderTurn, turn)
	return req, nil
}

func messagesBody(stream bool, prompt string) []byte {
	return fmt.Appendf(nil, `{"model":"claude-sonnet-4-5","max_tokens":256,"stream":%t,"messages":[{"role":"user","content":%s}]}`,
		stream, strconv.Quote(prompt))
}

// gate holds the memory phase's streams open between their first and
// second event for as long as the heap sample takes, then lets the rest of
// each stream go at once, so every stream still ends complete.
type gate struct {
	mu       sync.Mutex
	ch       chan struct{} // nil: waits run their full length
	released bool
}

func (g *gate) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ch, g.released = make(chan struct{}), false
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch != nil && !g.released {
		close(g.ch)
		g.released = true
	}
}

func (g *gate) disarm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ch, g.released = nil, false
}

// sleep is the mock's wait between events: a timer, cut short once the
// armed gate is released.
func (g *gate) sleep(ctx context.Context, d time.Duration) error {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// roomyLimits reports, in the mock's rate-limit headers, every request and
// token of the limit as remaining: a provider with room. The mock counts
// every request it serves (the bare proxy's too) in one-minute windows and
// reports what is left of the limit it advertises; a provider reporting
// none left is obeyed (a bucket full only in d lacks d of the key's rate,
// README "Rate limits and key pools"), and one reporting less left than a
// burst lowers the key's buckets to that on every turn. The mock enforces
// nothing; the headers keep their count and size, so gatekeeper still
// reads them as it would a real provider's.
type roomyLimits struct{ next http.RoundTripper }

// benchRPM and benchTPM are the provider key's limits with -key-limits,
// far above what the mock gets, and what the mock's rate-limit headers
// advertise: a provider whose limits are the ones configured, so that
// what it reports left is what gatekeeper's buckets hold, not less.
const (
	benchRPM = 10_000_000
	benchTPM = 10_000_000_000
)

func (r roomyLimits) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	for _, dim := range [...]struct{ limit, remaining string }{
		{"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining"},
		{"Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining"},
		{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests"},
		{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens"},
	} {
		if v := resp.Header.Get(dim.limit); v != "" && resp.Header.Get(dim.remaining) != "" {
			resp.Header.Set(dim.remaining, v)
		}
	}
	return resp, nil
}
