package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/admin"
	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/mockprovider"
	"gatekeeper/proxy"
	"gatekeeper/store/memory"
	"gatekeeper/telemetry"
	"gatekeeper/trajectory"
)

// Secrets of the test config. None may ever reach the upstream except the
// provider keys, and none may reach an agent.
const (
	vkA        = "vk-team-a-0123456789"
	vkB        = "vk-team-b-0123456789"
	antKey     = "sk-ant-upstream-key-1"
	oaiKey     = "sk-oai-upstream-key-1"
	gemKey     = "goog-upstream-key-1"
	adminToken = "admin-token-0123456789"
	readToken  = "reader-token-0123456789"
	// Approvers' tokens: the role "approver:X" votes as X.
	carolToken = "carol-secops-token-0123456789"
	daveToken  = "dave-secops-token-0123456789"
	erinToken  = "erin-sre-token-0123456789"
	// Agents' own provider credentials, which a tenant with credentials:
	// forward sends on; the mock accepts them besides the pool keys.
	ownAntKey   = "sk-ant-api03-own-agent-key-4242"
	ownAntOAuth = "sk-ant-oat01-own-subscription-token-4242"
	ownOaiKey   = "sk-proj-own-agent-key-4242"
	ownGemKey   = "AIzaOwnAgentKey4242"
)

// clock is a test clock that moves one millisecond per reading.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)} }

// advance moves the clock d ahead.
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Millisecond)
	return c.now
}

// env is gatekeeper in front of a mock provider, both on loopback, plus a
// twin mock (same seed, same clock start) for direct comparisons.
type env struct {
	mock    *mockprovider.Server
	mockURL string
	twinURL string
	gk      string
	store   *memory.Store
	ledger  *memory.Ledger
	spend   *memory.SpendLimits
	cfg     *config.Config
	px      *proxy.Server
	clk     *clock // gatekeeper's clock
	// With gates in the config: the approvals service and its store.
	svc  *approvals.Service
	apst *memory.Approvals
}

type envOpts struct {
	realClock bool // the mock stamps events with time.Now (per-event delay tests)
	limits    string
	upstream  string // base_url override for both providers
	// tel, when set, receives the turns' spans and metrics.
	tel *telemetry.Telemetry
	// log, when set, receives gatekeeper's JSON log at debug level.
	log io.Writer
	// approvals, when set, puts a layer between the approvals service
	// (and the proxy) and the memory approvals store.
	approvals func(approvals.Store) approvals.Store
	// script, when set, scripts both mocks.
	script *mockprovider.Script
	// wrap, when set, puts a layer between gatekeeper and the memory
	// store (e.record still reads the store itself).
	wrap func(trajectory.Store) trajectory.Store
	// storeTimeout, when set, replaces store.timeout.
	storeTimeout time.Duration
	// openaiKeys, when set, replaces the openai provider's keys (YAML
	// flow sequence); openaiExtra and teamAExtra are added to the openai
	// provider's and to team-a's entries (indented YAML lines).
	openaiKeys, openaiExtra, teamAExtra string
	// readOnly, when set, replaces team-a's read_only_tools (YAML flow
	// sequence).
	readOnly string
	// idle, when set, is the memory store's idle retention, on
	// gatekeeper's clock; only an explicit Sweep drops records.
	idle time.Duration
	// identity, when set, is the config's identity section.
	identity config.Identity
}

func newMock(t testing.TB, realClock bool, script *mockprovider.Script) (*mockprovider.Server, string) {
	opts := mockprovider.Options{Rand: rand.New(rand.NewPCG(7, 11)), Keys: []string{antKey, oaiKey, gemKey, ownAntKey, ownAntOAuth, ownOaiKey, ownGemKey}, Script: script}
	if !realClock {
		opts.Clock = newClock().Now
	}
	m := mockprovider.New(opts)
	ts := httptest.NewServer(m)
	t.Cleanup(ts.Close)
	return m, ts.URL
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	e := &env{}
	e.mock, e.mockURL = newMock(t, o.realClock, o.script)
	_, e.twinURL = newMock(t, o.realClock, o.script)
	up := e.mockURL
	if o.upstream != "" {
		up = o.upstream
	}
	readOnly := o.readOnly
	if readOnly == "" {
		readOnly = "[get_weather, Read]"
	}
	oaiKeys := o.openaiKeys
	if oaiKeys == "" {
		oaiKeys = "[{name: k1, key: " + oaiKey + "}]"
	}
	yaml := fmt.Sprintf(`
listen: 127.0.0.1:0
providers:
  - name: anthropic
    api: anthropic
    base_url: %[1]s
    default: true
    keys: [{name: k1, key: %[2]s}]
  - name: openai
    api: openai
    base_url: %[1]s
    keys: %[12]s
%[13]s
  - name: gemini
    api: gemini
    base_url: %[1]s
    keys: [{name: k1, key: %[16]s}]
tenants:
  - name: team-a
    keys: [%[4]s]
    budget: {turns: 200, tokens: 5000000, wall_clock: 2h, dollars: 20}
    read_only_tools: %[15]s
%[14]s
  - name: team-b
    keys: [%[5]s]
admin:
  tokens:
    - {name: alice, token: %[6]s, roles: [operator, approver]}
    - {name: bob, token: %[7]s, roles: [approver]}
    - {name: carol, token: %[9]s, roles: ["approver:secops"]}
    - {name: dave, token: %[10]s, roles: ["approver:secops"]}
    - {name: erin, token: %[11]s, roles: ["approver:sre"]}
%[8]s
`, up, antKey, oaiKey, vkA, vkB, adminToken, readToken, o.limits, carolToken, daveToken, erinToken, oaiKeys, o.openaiExtra, o.teamAExtra, readOnly, gemKey)
	cfg, err := config.Parse([]byte(yaml), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if o.identity.On() {
		cfg.Identity = o.identity
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.storeTimeout > 0 {
		cfg.Store.Timeout = config.Duration(o.storeTimeout)
	}
	e.cfg = cfg
	e.clk = newClock()
	e.store = memory.New(memory.Options{})
	if o.idle > 0 {
		e.store = memory.New(memory.Options{IdleRetention: o.idle, Clock: e.clk.Now, SweepEvery: time.Hour})
	}
	var st trajectory.Store = e.store
	if o.wrap != nil {
		st = o.wrap(e.store)
	}
	var logger *slog.Logger
	if o.log != nil {
		logger = slog.New(slog.NewJSONHandler(o.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if len(cfg.Gates) > 0 {
		gates, err := approvals.Compile(cfg.Gates)
		if err != nil {
			t.Fatal(err)
		}
		e.apst = memory.NewApprovals(memory.ApprovalsOptions{Clock: e.clk.Now})
		var ast approvals.Store = e.apst
		if o.approvals != nil {
			ast = o.approvals(e.apst)
		}
		e.svc = approvals.NewService(approvals.ServiceOptions{Store: ast, Gates: gates, Signals: e.store, Clock: e.clk.Now,
			Logger: slog.New(slog.DiscardHandler), MaxPending: cfg.Approvals.MaxPending})
	}
	e.ledger = memory.NewLedger(e.clk.Now)
	e.spend = memory.NewSpendLimits()
	px, err := proxy.New(proxy.Options{Config: cfg, Store: st, Clock: e.clk.Now, Logger: logger, Telemetry: o.tel, Approvals: e.svc, Ledger: e.ledger, SpendLimits: e.spend})
	if err != nil {
		t.Fatal(err)
	}
	e.px = px
	r := chi.NewRouter()
	adminOpts := []admin.Option{admin.WithSignals(e.store), admin.WithLedger(e.ledger), admin.WithSpendLimits(e.spend)}
	if e.svc != nil {
		adminOpts = append(adminOpts, admin.WithApprovals(e.svc))
	}
	admin.New(cfg, e.store, logger, nil, adminOpts...).Routes(r)
	px.Routes(r)
	gk := httptest.NewServer(r)
	t.Cleanup(func() {
		gk.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		px.Close(ctx)
	})
	e.gk = gk.URL
	return e
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// do sends a raw request to gatekeeper.
func (e *env) do(t testing.TB, method, path, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, e.gk+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t testing.TB, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return b
}

// record reads a record from the store.
func (e *env) record(t testing.TB, id string) *trajectory.Record {
	t.Helper()
	rec, err := e.store.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("record %s: %v", id, err)
	}
	return rec
}

func (e *env) events(t testing.TB, id string) []trajectory.Event {
	t.Helper()
	evs, err := e.store.Events(context.Background(), id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// waitFor polls cond until it holds, for at most 10 s: for effects that
// land after the agent's response is complete (the turn is recorded when
// the upstream body is closed).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// sseEvents splits an SSE body into event blocks (raw text).
func sseEvents(b []byte) []string {
	var out []string
	for _, blk := range strings.Split(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n\n") {
		if strings.TrimSpace(blk) != "" {
			out = append(out, blk)
		}
	}
	return out
}

// readEvent reads one SSE event block from r.
func readEvent(r *bufio.Reader) (string, error) {
	var buf bytes.Buffer
	for {
		line, err := r.ReadString('\n')
		buf.WriteString(line)
		if err != nil {
			if errors.Is(err, io.EOF) && buf.Len() == 0 {
				return "", io.EOF
			}
			return buf.String(), err
		}
		if line == "\n" || line == "\r\n" {
			return buf.String(), nil
		}
	}
}

const anthropicBody = `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":%t,"messages":[{"role":"user","content":%q}],
 "tools":[{"name":"Bash","description":"run a command","input_schema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}]}`

func anthropicReq(stream bool, prompt string) string {
	return fmt.Sprintf(anthropicBody, stream, prompt)
}

var anthropicHdr = []string{"x-api-key", vkA, "anthropic-version", "2023-06-01", "content-type", "application/json"}

func hdr(extra ...string) []string { return append(append([]string{}, anthropicHdr...), extra...) }
