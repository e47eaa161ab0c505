package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/admin"
	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/console"
	"gatekeeper/feed"
	"gatekeeper/internal/conncap"
	"gatekeeper/mockprovider"
	"gatekeeper/proxy"
	"gatekeeper/ratelimit"
	"gatekeeper/signin"
	"gatekeeper/spendlimit"
	"gatekeeper/store/memory"
	redisstore "gatekeeper/store/redis"
	"gatekeeper/telemetry"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

func runServe(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "config.yaml", "config file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*path, getenv, stderr)
	if err != nil {
		return err
	}
	lw := newLogWriter(stderr)
	defer lw.Close()
	log := newLogger(cfg, lw)
	srv, err := newServer(ctx, cfg, log, getenv)
	if err != nil {
		return err
	}
	defer srv.close()
	srv.path = *path
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	log.Info("gatekeeper listening", slog.String("addr", ln.Addr().String()), slog.String("store", cfg.Store.Kind),
		slog.Bool("tls", cfg.TLS.On()))
	stopHUP := srv.reloadOnHUP(ctx)
	defer stopHUP()
	return srv.serve(ctx, ln)
}

func loadConfig(path string, getenv func(string) string, stderr io.Writer) (*config.Config, error) {
	cfg, err := config.Load(path, getenv)
	if err != nil {
		return nil, err
	}
	// Gates' conditions are CEL, which config does not know: they are
	// compiled here, and every problem of both checks is listed at once.
	verr := cfg.Validate()
	_, gerr := approvals.Compile(cfg.Gates)
	if verr != nil || gerr != nil {
		fmt.Fprintf(stderr, "%s: invalid config:\n", path)
		if verr != nil {
			fmt.Fprintf(stderr, "%v\n", verr)
		}
		if gerr != nil {
			fmt.Fprintf(stderr, "%v\n", gerr)
		}
		return nil, errReported
	}
	return cfg, nil
}

// newLogger is the process's log, written to w; a logWriter's lines are
// batched, with warnings and errors written at once.
func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.Log.Level)) // validated
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	if cfg.Log.Format == "text" {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	if lw, ok := w.(*logWriter); ok {
		h = batchHandler{Handler: h, lw: lw}
	}
	return slog.New(h)
}

// redisOpenTimeout bounds the startup check that Redis answers.
const redisOpenTimeout = 10 * time.Second

// redisKeyPrefix starts the rate-limit buckets' keys, beside the store's
// own "gk:{...}" keys.
const redisKeyPrefix = "gk:"

// server is one running gatekeeper: its HTTP handler and what it owns.
type server struct {
	handler http.Handler
	limits  config.Limits // the server's header and idle timeouts
	store   trajectory.Store
	log     *slog.Logger
	mockErr chan error
	stop    context.CancelFunc
	proxy   *proxy.Server
	tel     *telemetry.Telemetry

	redis     goredis.UniversalClient // shared by the record and approvals stores and the rate-limit buckets; nil with memory
	approvals *approvals.Service      // nil without gates
	aprDone   chan struct{}           // closed when approvals.Run has returned

	feed     *feed.Feed    // the live event stream
	keysDone chan struct{} // closed when the keys publisher has returned

	grace time.Duration // shutdown_grace

	// The config file and what reads it again (reload.go): cfg is the
	// running config, path its file ("" when the server was built from a
	// config in memory: nothing to reload).
	cfg       atomic.Pointer[config.Config]
	path      string
	getenv    func(string) string
	admin     *admin.API
	mockURL   string       // the built-in mock's base URL; "" when none runs
	cert      *certificate // the listener's, with tls; nil for plain HTTP
	reloading sync.Mutex   // one reload at a time
}

// newServer builds gatekeeper from a validated config. Providers whose
// base_url is "mock" are served by a mock provider started here on a
// loopback port, so the quick start works offline.
func newServer(ctx context.Context, cfg *config.Config, log *slog.Logger, getenv func(string) string) (*server, error) {
	s := &server{log: log, limits: cfg.Limits, grace: cfg.ShutdownGrace.Std(), getenv: getenv}
	if cfg.TLS.On() {
		cert, err := newCertificate(cfg.TLS, log)
		if err != nil {
			return nil, err
		}
		s.cert = cert
	}
	ctx, s.stop = context.WithCancel(ctx)
	if err := s.startMock(ctx, cfg); err != nil {
		s.stop()
		return nil, err
	}
	tel, err := telemetry.New(ctx, telemetry.Options{Config: cfg.Telemetry, Getenv: getenv})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	s.tel = tel
	var aprStore approvals.Store
	var buckets ratelimit.Buckets // in the proxy's memory unless Redis is shared
	var ledger tenant.Ledger
	var sessions console.SessionStore // the console's sign-in sessions, shared by replicas with Redis
	var spend spendlimit.Store
	var revocations signin.Revocations // tokens revoked at the gateway sign-in
	switch cfg.Store.Kind {
	case config.StoreMemory:
		revocations = memory.NewRevocations(nil)
		s.store = memory.New(memory.Options{Retention: cfg.Store.Retention.Std(), IdleRetention: cfg.Store.IdleRetention.Std()})
		ledger = memory.NewLedger(nil)
		spend = memory.NewSpendLimits()
		aprStore = memory.NewApprovals(memory.ApprovalsOptions{Retention: cfg.Store.Retention.Std()})
		sessions = memory.NewSessions(0, nil)
	case config.StoreRedis:
		var client goredis.UniversalClient
		var err error
		if cfg.Store.RedisCluster {
			client, err = redisstore.NewClusterClient(cfg.Store.RedisURL)
		} else {
			client, err = redisstore.NewClient(cfg.Store.RedisURL)
		}
		if err != nil {
			s.close()
			return nil, fmt.Errorf("store.kind redis: store.redis_url: %w", err)
		}
		s.redis = client
		// Every call that does not get Redis's answer, whoever made it.
		redisstore.CountFailures(client, tel.StoreFailed)
		// A replica that cannot reach the shared store must not start
		// serving: it would refuse every turn.
		octx, cancel := context.WithTimeout(ctx, redisOpenTimeout)
		rs, err := redisstore.Open(octx, redisstore.Options{Client: client, Retention: cfg.Store.Retention.Std(), IdleRetention: cfg.Store.IdleRetention.Std()})
		cancel()
		if err != nil {
			s.close()
			return nil, fmt.Errorf("store.kind redis: opening store.redis_url: %w", err)
		}
		s.store = rs
		ledger = rs.Ledger()
		spend = rs.SpendLimits()
		aprStore = redisstore.NewApprovals(redisstore.ApprovalsOptions{Client: client, Retention: cfg.Store.Retention.Std()})
		revocations = redisstore.NewRevocations(client, nil)
		sessions = redisstore.NewSessions(client)
		// Every replica draws on one budget per provider key.
		buckets = ratelimit.NewRedis(client, redisKeyPrefix)
	default:
		s.close()
		return nil, fmt.Errorf("store.kind %q is not available in this build; use memory or redis", cfg.Store.Kind)
	}
	keys, err := s.startFeed(ctx)
	if err != nil {
		s.close()
		return nil, err
	}
	aprStore = feed.NewApprovals(aprStore, s.feed)
	slack, err := s.startApprovals(ctx, cfg, aprStore)
	if err != nil {
		s.close()
		return nil, err
	}
	var gates *approvals.Gates
	if s.approvals != nil {
		gates = s.approvals.Gates()
		tel.WatchApprovals(s.approvals.OldestPending)
	}
	px, err := proxy.New(proxy.Options{Config: cfg, Store: s.store, Logger: log, Telemetry: tel, Approvals: s.approvals, Gates: gates,
		Buckets: buckets, Ledger: ledger, SpendLimits: spend, Replica: replicaName(cfg, getenv), Revocations: revocations})
	if err != nil {
		s.close()
		return nil, err
	}
	s.proxy = px
	r := chi.NewRouter()
	// Every route's body comes within limits.body_timeout per 4 KiB, or
	// its connection is closed (turns also answer 408 in the provider's
	// format when their body is late).
	r.Use(conncap.Bound(cfg.Limits.BodyTimeout.Std(), config.BodyProgressBytes))
	r.Handle("/metrics", tel.Handler())
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	r.Get("/readyz", func(w http.ResponseWriter, r *http.Request) {
		pctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.store.Ping(pctx); err != nil {
			http.Error(w, "store unreachable", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	opts := []admin.Option{admin.WithStateObserver(tel)}
	if sigs, ok := s.store.(trajectory.Signals); ok {
		opts = append(opts, admin.WithSignals(sigs))
	}
	if s.approvals != nil {
		opts = append(opts, admin.WithApprovals(s.approvals))
	}
	opts = append(opts, admin.WithStream(s.feed, keys), admin.WithLedger(ledger), admin.WithSpendLimits(spend), admin.WithReloader(s))
	if slack != nil {
		r.Method(http.MethodPost, approvals.SlackInteractionsPath, trustSigned(cfg.Approvals.Slack.SigningSecret, slack.Handler(s.approvals)))
	}
	signin.New(signin.Options{Config: s.cfg.Load, Revocations: revocations, Logger: log}).Routes(r)
	var signIn *console.SignIn
	if cfg.Identity.Console != nil {
		signIn = console.NewSignIn(console.SignInOptions{Identity: cfg.Identity, People: cfg.Approvals, Store: sessions, Logger: log,
			StoreTimeout: cfg.Store.Timeout.Std()})
		opts = append(opts, admin.WithSessions(signIn))
	}
	console.Routes(r, signIn)
	s.admin = admin.New(cfg, s.store, log, nil, opts...)
	s.admin.Routes(r)
	px.Routes(r)
	s.handler = r
	s.cfg.Store(cfg)
	return s, nil
}

// startFeed opens the live event stream (on Redis when the store is, so
// that every replica's changes reach every subscriber), makes the record
// store publish what it writes, and starts the keys publisher, which it
// returns.
func (s *server) startFeed(ctx context.Context) (*feed.Keys, error) {
	octx, cancel := context.WithTimeout(ctx, redisOpenTimeout)
	f, err := feed.New(octx, feed.Options{Redis: s.redis, Logger: s.log})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("event stream: %w", err)
	}
	s.feed = f
	sigs, ok := s.store.(feed.SignalingStore)
	if !ok {
		return nil, fmt.Errorf("event stream: the %T store carries no signals", s.store)
	}
	s.store = feed.NewRecords(sigs, f)
	keys := feed.NewKeys(f, nil)
	s.tel.TeeRateLimits(keys)
	s.keysDone = make(chan struct{})
	go func() {
		defer close(s.keysDone)
		keys.Run(ctx)
	}()
	return keys, nil
}

// startApprovals builds the approvals Service when gates are configured,
// with the channels config names, and runs its expiry sweep until ctx
// ends. It returns the Slack channel, whose interactions serve mounts, or
// nil.
func (s *server) startApprovals(ctx context.Context, cfg *config.Config, store approvals.Store) (*approvals.Slack, error) {
	if len(cfg.Gates) == 0 {
		return nil, nil
	}
	gates, err := approvals.Compile(cfg.Gates)
	if err != nil {
		return nil, err // loadConfig has already reported it
	}
	// Every call to the approvals store, the Slack hook's replay guard
	// and the proxy's hold lookups among them, waits at most
	// store.timeout, as the record store's do.
	store = approvals.Bounded(store, cfg.Store.Timeout.Std())
	notifiers, slack, err := approvals.Channels(cfg.Approvals, store, s.log)
	if err != nil {
		return nil, err
	}
	o := approvals.ServiceOptions{
		Store: store, Gates: gates, Notifiers: notifiers, Logger: s.log, MaxPending: cfg.Approvals.MaxPending,
		Decided: func(r *approvals.Request) {
			var latency time.Duration
			if r.DecidedAt != nil {
				latency = r.DecidedAt.Sub(r.CreatedAt)
			}
			s.tel.ApprovalDecided(r.Gate, string(r.State), latency)
		},
	}
	if sigs, ok := s.store.(trajectory.Signals); ok {
		o.Signals = sigs
	}
	s.approvals = approvals.NewService(o)
	s.aprDone = make(chan struct{})
	go func() {
		defer close(s.aprDone)
		s.approvals.Run(ctx)
	}()
	return slack, nil
}

func (s *server) startMock(ctx context.Context, cfg *config.Config) error {
	need := false
	for _, p := range cfg.Providers {
		need = need || p.BaseURL == "mock"
	}
	if !need {
		return nil
	}
	ready := make(chan string, 1)
	s.mockErr = make(chan error, 1)
	go func() {
		s.mockErr <- mockprovider.Run(ctx, "127.0.0.1:0", mockprovider.Options{Logger: s.log}, func(addr string) { ready <- addr })
	}()
	select {
	case addr := <-ready:
		s.mockURL = "http://" + addr
		for i := range cfg.Providers {
			if cfg.Providers[i].BaseURL == "mock" {
				cfg.Providers[i].BaseURL = s.mockURL
			}
		}
		s.log.Info("built-in mock provider serving", slog.String("addr", addr))
		return nil
	case err := <-s.mockErr:
		return fmt.Errorf("starting the mock provider: %w", err)
	}
}

func (s *server) serve(ctx context.Context, ln net.Listener) error {
	pending := cmp.Or(s.limits.MaxPendingConnections, conncap.DefaultMax())
	s.log.Info("connections without authentication capped", slog.Int("max_pending_connections", pending))
	ln = conncap.NewListener(ln, pending, s.log)
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.limits.HeaderTimeout.Std(),
		IdleTimeout:       s.limits.IdleTimeout.Std(),
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ConnContext:       conncap.ConnContext,
	}
	// Shutdown does not end requests; a turn held for approval may wait
	// for minutes, and its hold outlives this process for the retry.
	hs.RegisterOnShutdown(s.proxy.EndHolds)
	// Event streams never end by themselves; their clients resume with
	// Last-Event-ID on another replica.
	hs.RegisterOnShutdown(s.feed.EndSubscriptions)
	errc := make(chan error, 1)
	if s.cert != nil {
		// HTTPS on HTTP/1.1 only, the protocol the plain listener speaks
		// and every behaviour is tested on: an empty TLSNextProto keeps
		// the server from offering HTTP/2, where a refusal before the body
		// could not close its connection.
		hs.TLSConfig = s.cert.tlsConfig()
		hs.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
		go func() { errc <- hs.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- hs.Serve(ln) }()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	grace := s.grace
	s.log.Info("shutting down", slog.Duration("grace", grace))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	err := hs.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	// The final writes get a little time of their own past the grace.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), finalWrites)
	defer fcancel()
	if errors.Is(err, context.DeadlineExceeded) {
		// Streams outlived the grace: each is ended as a cancel ends it,
		// and charged for what streamed before the process exits.
		s.log.Warn("shutdown grace ran out; ending the calls still in flight")
		if left := s.proxy.EndStreams(fctx); left > 0 {
			s.log.Error("calls still in flight at exit; each one's figures are logged if its charge was not written", slog.Int("calls", left))
		} else {
			err = nil
		}
	}
	// Charges that waited for the store get what is left; those it cannot
	// take are logged with their figures.
	s.proxy.Close(fctx)
	return err
}

// trustSigned marks the connection of a Slack delivery signed with secret
// as authenticated (see conncap.Trust) before next reads it again and
// acts on it. The body is read here within SlackMaxBody; next gets the
// same bytes, and answers an unsigned or oversized one as it always has.
func trustSigned(secret string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, approvals.SlackMaxBody+1))
		if err != nil {
			w.Header().Set("Connection", "close")
			http.Error(w, "cannot read request body", http.StatusBadRequest)
			return
		}
		if approvals.VerifySlack(secret, r.Header, body, time.Now()) == nil {
			conncap.Trust(r.Context())
		}
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
		next.ServeHTTP(w, r)
	})
}

// finalWrites bounds, past shutdown_grace, the ending of streams and the
// last charges.
const finalWrites = 5 * time.Second

func (s *server) close() {
	s.stop()
	if s.tel != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.tel.Shutdown(ctx) // flushes the last spans
		cancel()
	}
	if s.mockErr != nil {
		<-s.mockErr
	}
	if s.aprDone != nil {
		<-s.aprDone // s.stop ended its context
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.approvals.Close(ctx) // stops the notifications still running
		cancel()
	}
	if s.keysDone != nil {
		<-s.keysDone // s.stop ended its context
	}
	if s.feed != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.feed.Close(ctx) // appends the events still queued
		cancel()
	}
	if s.store != nil {
		_ = s.store.Close()
	}
	if s.redis != nil {
		_ = s.redis.Close()
	}
}

// replicaName names this process among the replicas, the same across its
// restarts so that it reclaims the calls it left in flight: GATEKEEPER_REPLICA,
// or the host name and the listen address. A listen address on port 0 names
// no one: the proxy then draws a name, and calls left in flight are
// reclaimed once they fall silent.
func replicaName(cfg *config.Config, getenv func(string) string) string {
	if name := getenv("GATEKEEPER_REPLICA"); name != "" {
		return name
	}
	host, err := os.Hostname()
	if _, port, perr := net.SplitHostPort(cfg.Listen); err != nil || perr != nil || port == "0" {
		return ""
	}
	return host + "@" + cfg.Listen
}
