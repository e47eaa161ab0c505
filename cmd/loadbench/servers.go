package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/mockprovider"
)

// Secrets of the benchmark's config: loopback only, never real.
const (
	virtualKey  = "vk-loadbench-0123456789"
	upstreamKey = "sk-ant-loadbench-upstream-0123"
	adminToken  = "loadbench-admin-token-0123456789"
)

// Indexes of bench.targets: gatekeeper goes first in every round.
const (
	gkIdx   = 0
	bareIdx = 1
)

// target is one proxy process in front of the mock.
type target struct {
	name       string
	url        string
	gatekeeper bool
	proc       *proc
}

// bench is everything one run starts: the mock and the trace sink in this
// process, gatekeeper and the bare proxy as processes of their own, and
// the client driving them.
type bench struct {
	p       params
	dir     string // the run's temporary directory: binary, config, logs
	src     string // the repository gatekeeper was built from
	mock    *mockprovider.Server
	client  *http.Client
	clientT *http.Transport
	targets [2]target
	redis   goredis.UniversalClient // with -redis: this process's own client, for INFO

	// scrapeCost is what one read of a target's counters allocates in
	// it, taken off every round.
	scrapeCost [2]allocs

	servers []*http.Server // in this process
	served  chan error     // one value per server when its Serve returns
	procs   []*proc
	stderr  io.Writer
}

// start builds gatekeeper, and brings up the mock, the trace sink, the
// bare proxy and gatekeeper on loopback.
func start(ctx context.Context, p params, stderr io.Writer) (b *bench, err error) {
	b = &bench{p: p, served: make(chan error, 2), stderr: stderr}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.close())
			b = nil
		}
	}()
	if b.dir, err = os.MkdirTemp("", "loadbench-"); err != nil {
		return b, err
	}
	src := p.src
	if src == "" {
		if src, err = moduleRoot(ctx); err != nil {
			return b, err
		}
	}
	fmt.Fprintf(stderr, "loadbench: go build ./cmd/gatekeeper in %s\n", src)
	b.src = src
	bin, err := buildGatekeeper(ctx, src, b.dir)
	if err != nil {
		return b, err
	}

	// The mock advertises the key's own limits, all of them left
	// (roomyLimits): a provider with room.
	b.mock = mockprovider.New(mockprovider.Options{Keys: []string{upstreamKey}, RequestsPerMinute: benchRPM, TokensPerMinute: benchTPM})
	mockURL, err := b.serve(roomyLimits(b.mock))
	if err != nil {
		return b, err
	}
	sinkURL, err := b.serve(http.HandlerFunc(traceSink))
	if err != nil {
		return b, err
	}
	if p.redisURL != "" {
		if b.redis, err = redisClient(ctx, p.redisURL); err != nil {
			return b, err
		}
	}

	cfgPath := filepath.Join(b.dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(gatekeeperConfig(p, mockURL, sinkURL)), 0o600); err != nil {
		return b, err
	}
	gkCmd := exec.Command(bin, "serve", "-config", cfgPath)
	gkCmd.Env = childEnv()
	gk, err := b.startProc("gatekeeper", gkCmd, filepath.Join(b.dir, "gatekeeper.log"))
	if err != nil {
		return b, err
	}
	gkAddr, err := waitListening(ctx, gk)
	if err != nil {
		return b, err
	}

	self, err := os.Executable()
	if err != nil {
		return b, err
	}
	bareCmd := exec.Command(self, bareCommand, "-upstream", mockURL, "-key", upstreamKey)
	bareCmd.Env = childEnv()
	out, err := bareCmd.StdoutPipe()
	if err != nil {
		return b, err
	}
	bare, err := b.startProc("bare", bareCmd, filepath.Join(b.dir, "bare.log"))
	if err != nil {
		return b, err
	}
	bareAddr, err := readAddr(ctx, bare, out)
	if err != nil {
		return b, err
	}

	b.clientT = clientTransport(max(p.conns, p.streams, p.records) + p.subscribers)
	b.client = &http.Client{Transport: b.clientT}
	b.targets = [2]target{
		gkIdx:   {name: "gatekeeper", url: "http://" + gkAddr, gatekeeper: true, proc: gk},
		bareIdx: {name: "bare", url: "http://" + bareAddr, proc: bare},
	}
	if err := b.ready(ctx); err != nil {
		return b, err
	}
	return b, nil
}

// startProc starts a process and keeps it for close.
func (b *bench) startProc(name string, cmd *exec.Cmd, log string) (*proc, error) {
	p, err := startProc(name, cmd, log)
	if err != nil {
		return nil, err
	}
	b.procs = append(b.procs, p)
	fmt.Fprintf(b.stderr, "loadbench: started %s (pid %d), log %s\n", name, p.pid(), log)
	return p, nil
}

// ready waits until gatekeeper answers /readyz and both targets' counters
// can be read, and measures what one read of the counters allocates.
func (b *bench) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.targets[gkIdx].url+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := b.client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if err := clockSleep(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("gatekeeper not ready: %w", err)
		}
	}
	for i, tg := range b.targets {
		// Three reads: the difference of the last two is one read's
		// allocations (the first may set up what later reads reuse).
		var a [3]allocs
		for j := range a {
			var err error
			if a[j], err = b.readAllocs(ctx, tg); err != nil {
				return fmt.Errorf("reading %s's allocation counters: %w", tg.name, err)
			}
		}
		b.scrapeCost[i] = a[2].sub(a[1])
	}
	return nil
}

// childEnv is this process's environment without the OTEL_ variables, so
// that gatekeeper's telemetry is what its config says.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// gatekeeperConfig is what an operator would run: the config.yaml example's
// shape with the mock as provider, a budget on every run and key limits far
// above the load, the live event stream and metrics (always on), traces
// sampled to the sink, the default log level, and (-tenant-limits) the
// tenant's spend and trajectory limits, far above the load. With -redis the store, the
// event stream and the key buckets are in Redis.
func gatekeeperConfig(p params, mockURL, sinkURL string) string {
	store := "{kind: memory}"
	if p.redisURL != "" {
		store = fmt.Sprintf("{kind: redis, redis_url: %q}", p.redisURL)
	}
	traces := "{enabled: false}"
	if p.traceRatio > 0 {
		traces = fmt.Sprintf("{enabled: true, otlp_endpoint: %q, sample_ratio: %s}",
			sinkURL+"/v1/traces", strconv.FormatFloat(p.traceRatio, 'g', -1, 64))
	}
	// Without tenant limits the runs are unbounded too: written 0s, since
	// absent run limits take their defaults.
	limits := "    limits: {max_live_trajectories: 0, new_trajectories_per_hour: 0}"
	if p.tenantLimits {
		limits = "    limits: {dollars_per_day: 100000000, dollars_per_month: 1000000000, max_live_trajectories: 10000000, new_trajectories_per_hour: 100000000}"
	}
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
providers:
  - name: anthropic
    api: anthropic
    base_url: %s
    default: true
    keys:
      - {name: main, key: %q, rpm: %d, input_tpm: %d, output_tpm: %[5]d}
prices:
  claude-sonnet-4-5: {input: 3.00, cached_input: 0.30, cache_write: 3.75, output: 15.00}
tenants:
  - name: bench
    keys: [%q]
    priority: interactive
    budget: {turns: 1000000000, tokens: 1000000000000, wall_clock: 720h, dollars: 10000000}
    call_limits: {max_output_tokens: 32000, call_deadline: 10m}
    read_only_tools: [Read, Glob, Grep, LS]
%s
admin:
  tokens:
    - {name: admin, token: %q, roles: [operator, approver, "approver:secops"]}
rate_limits:
  max_wait: 30s
gates:
  - name: destructive-shell
    when: tool.name.lowerAscii() == "bash" && tool.input.command.matches(r'\brm\s+-rf\b')
    approvers: {roles: [secops], quorum: 1}
    expiry: 15m
approvals:
  people:
    - {name: admin, admin_tokens: [admin], roles: [secops]}
telemetry:
  traces: %s
watchdog: {enabled: %t}
log: {level: info}
`, store, mockURL, upstreamKey, benchRPM, benchTPM, virtualKey, limits, adminToken, traces, p.watchdog)
}

// traceSink accepts OTLP/HTTP trace exports and drops them: an empty
// ExportTraceServiceResponse is zero bytes.
func traceSink(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 64<<20))
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
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

// close stops the processes by PID, then this process's servers, and
// removes the temporary directory unless -keep says otherwise.
func (b *bench) close() error {
	var errs []error
	if b.clientT != nil {
		b.clientT.CloseIdleConnections()
	}
	for _, p := range b.procs {
		errs = append(errs, p.stop())
		fmt.Fprintf(b.stderr, "loadbench: stopped %s (pid %d)\n", p.name, p.pid())
	}
	b.procs = nil
	for _, srv := range b.servers {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs = append(errs, srv.Shutdown(ctx))
		cancel()
	}
	for range b.servers {
		if err := <-b.served; !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	b.servers = nil
	if b.redis != nil {
		errs = append(errs, b.redis.Close())
	}
	if b.dir != "" {
		if b.p.keep {
			fmt.Fprintf(b.stderr, "loadbench: kept %s\n", b.dir)
		} else {
			errs = append(errs, os.RemoveAll(b.dir))
		}
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

// benchRPM and benchTPM are the provider key's limits, far above what the
// mock gets, and what the mock's rate-limit headers advertise: a provider
// whose limits are the ones configured.
const (
	benchRPM = 10_000_000
	benchTPM = 10_000_000_000
)

// roomyLimits reports, in the mock's rate-limit headers, every request and
// token of the limit as remaining: a provider with room. The mock counts
// every request it serves (the bare proxy's too) in one-minute windows and
// reports what is left of the limit it advertises; a provider reporting
// less left than a burst lowers the key's buckets to that on every turn
// (docs/guide/keys.md, "Slices"), which is not the roomy key this
// benchmark means. The headers keep their count and size, so gatekeeper
// still reads them as it would a real provider's.
func roomyLimits(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&roomyWriter{ResponseWriter: w}, r)
	})
}

// roomyWriter rewrites the rate-limit headers as the reply's header goes
// out; Unwrap lets http.ResponseController reach the real writer's Flush.
type roomyWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *roomyWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		h := w.Header()
		for _, dim := range [...]struct{ limit, remaining string }{
			{"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining"},
			{"Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining"},
			{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests"},
			{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens"},
		} {
			if v := h.Get(dim.limit); v != "" && h.Get(dim.remaining) != "" {
				h.Set(dim.remaining, v)
			}
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *roomyWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

func (w *roomyWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
