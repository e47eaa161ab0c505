package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/identity"
	"gatekeeper/internal/clock"
	"gatekeeper/internal/conncap"
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/admit"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/deadline"
	"gatekeeper/proxy/internal/dialect"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/inflight"
	"gatekeeper/proxy/internal/keys"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/internal/passthrough"
	"gatekeeper/proxy/internal/settle"
	"gatekeeper/proxy/internal/sweep"
	"gatekeeper/proxy/internal/wire"
	"gatekeeper/proxy/relay"
	"gatekeeper/ratelimit"
	"gatekeeper/signin"
	"gatekeeper/spendlimit"
	"gatekeeper/streaming"
	"gatekeeper/telemetry"
	"gatekeeper/tenant"
	"gatekeeper/trajectory"
)

// Options are the proxy's dependencies.
type Options struct {
	Config *config.Config
	Store  trajectory.Store
	Logger *slog.Logger
	// Clock gives the time; time.Now when nil.
	Clock func() time.Time
	// Transport carries upstream calls; a tuned http.Transport when nil.
	Transport http.RoundTripper
	// Prices prices turns; the embedded table with config's prices over it
	// when nil.
	Prices *meter.Table
	// Signals carries operators' control requests between replicas; the
	// store's own when nil and the store has them.
	Signals trajectory.Signals
	// Telemetry receives a span and metrics per turn; nil records nothing.
	Telemetry *telemetry.Telemetry
	// Approvals holds replies whose tool calls a gate matches until they
	// are approved; nil (or no gate) holds nothing.
	Approvals *approvals.Service
	// Gates are the compiled gates; the service's own when nil.
	Gates *approvals.Gates
	// Replica names this process among the replicas sharing the store,
	// stably across its restarts, so that it reclaims at start the calls
	// it left in flight; random when empty.
	Replica string
	// Buckets holds the provider keys' rate-limit capacity; in this
	// process when nil. Replicas share it through ratelimit.NewRedis.
	Buckets ratelimit.Buckets
	// Ledger keeps tenants' spend and live runs against tenants[].limits;
	// required when a tenant has limits. Replicas share a Redis one.
	Ledger tenant.Ledger
	// SpendLimits keeps the admin API's spend limits on people, read
	// beside identity.limits; nil for config's alone.
	SpendLimits spendlimit.Store
	// Revocations are the tokens revoked at the gateway sign-in; a
	// person's token found there is refused while identity.gateway is
	// enabled. Nil: none are checked.
	Revocations signin.Revocations
}

// Server serves the agent-facing routes.
type Server struct {
	// rules are what the config decides of turns, swapped whole by
	// Reload; a request reads them once and keeps them to its end.
	rules      atomic.Pointer[rules]
	reloading  sync.Mutex // one Reload at a time
	opts       Options    // what New was given, for Reload's builds
	store      trajectory.Store
	links      trajectory.Links // nil: the store keeps none, and later turns go to their conversation's run
	log        *slog.Logger
	now        func() time.Time
	transport  http.RoundTripper
	bufs       *relay.BufferPool
	hints      *admit.Hints
	settles    *settle.Retrier
	behind     *settle.Behind[*settle.Turn] // settles written behind their replies; nil: each at once
	live       *inflight.Registry[*turn]
	tel        *telemetry.Telemetry
	stopListen context.CancelFunc
	listening  chan struct{}
	closing    chan struct{} // closed by EndHolds: held waits end
	endHolds   sync.Once
	ending     atomic.Bool   // EndStreams began: a call that goes live after is ended at once
	ledger     tenant.Ledger // nil when no tenant has limits
	// admitBudget is the store time a turn's admission may take in all
	// (deadline.WithBudget): store.timeout, or none on a store in the
	// process.
	admitBudget time.Duration
	replica     string // Options.Replica
	owner       string // what this run writes as its calls' owner: replica#incarnation
	sweeper     *sweep.Sweeper
	// waiting are the calls whose reply ended and whose charge waits for
	// the store, by call id, for the sweeper's beats (waitingSettle).
	waitingMu sync.Mutex
	waiting   map[string]sweep.Call
	refusals  *refusalLimiter // when a run's next refused event is due
}

// rules are one config's part in the proxy: the tenants and their
// virtual keys, the providers and their key pools, the prices, the budget
// stages, the gates, the limits and the watchdog, with what is built from
// them. A value is never changed: Reload builds a new one and swaps it in.
type rules struct {
	cfg       *config.Config
	keys      *wire.Keyring
	people    *identity.Verifier // nil unless people sign in (people.go)
	providers map[string]*upstream
	def       *upstream
	prices    *meter.Table
	stages    meter.Thresholds
	esc       *escrow.Keeper
	records   *admit.Records  // the run and thread records a turn is admitted on
	ceilings  *admit.Ceilings // the turns' reservations against their tenants' ceilings
	budget    *admit.Budget   // the turns' admission against their chains' budgets
	pass      *passthrough.Gate
	// sched is the one rate-limit scheduler of the provider keys, kept
	// across reloads so that a key kept by name keeps its buckets and its
	// waiting turns; nil while no key has a limit.
	sched *keys.Scheduler
	// secrets are every provider key any config of this process named,
	// redacted from upstream error bodies: a removed key's calls may
	// still be in flight.
	secrets []string
}

// upstream is one configured provider, with the reverse proxy of its
// pass-through routes.
type upstream struct {
	cfg    *config.Provider
	api    streaming.API // the API family; the turn API is chosen per path
	target *url.URL
	rp     *httputil.ReverseProxy
	pool   *keys.Pool
	// pass is what may pass through besides turns: the built-in
	// allowlist and providers[].passthrough.
	pass []config.Passthrough
}

// New checks opts and builds the proxy.
func New(opts Options) (*Server, error) {
	if opts.Config == nil || opts.Store == nil {
		return nil, fmt.Errorf("proxy: config and store are required")
	}
	s := &Server{
		opts:      opts,
		store:     deadline.Store(opts.Store, opts.Config.Store.Timeout.Std()),
		log:       opts.Logger,
		now:       opts.Clock,
		transport: opts.Transport,
		bufs:      relay.NewBufferPool(),
		hints:     admit.NewHints(1 << 16),
		settles:   settle.NewRetrier(),
		refusals:  newRefusalLimiter(refusalEvery),
		live:      inflight.New[*turn](),
		tel:       opts.Telemetry,
		listening: make(chan struct{}),
		replica:   opts.Replica,
		ledger:    deadline.Ledger(opts.Ledger, opts.Config.Store.Timeout.Std()),
		// The stores in the process are not timed: no budget either.
		admitBudget: deadline.Budgeted(opts.Store, opts.Config.Store.Timeout.Std()),
	}
	if s.replica == "" {
		s.replica = "replica-" + admit.NewCallID()
	}
	s.owner = s.replica + "#" + admit.NewCallID()
	if l, ok := opts.Store.(trajectory.Links); ok {
		s.links = deadline.Links(l, opts.Config.Store.Timeout.Std())
	}
	sigs := opts.Signals
	if sigs == nil {
		sigs, _ = opts.Store.(trajectory.Signals)
	}
	s.closing = make(chan struct{})
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.transport == nil {
		s.transport = passthrough.NewTransport()
	}
	ru, err := s.build(opts.Config, opts.Gates, nil)
	if err != nil {
		return nil, err
	}
	s.rules.Store(ru)
	if w := opts.Config.Store.SettleWindow.Std(); w > 0 && opts.Config.Store.Kind == config.StoreRedis {
		s.behind = settle.NewBehind[*settle.Turn](w, s.store, s.log)
	}
	s.waiting = make(map[string]sweep.Call)
	s.sweeper = sweep.New(sweep.Options{Store: s.store, Config: ru.cfg, Clock: s.now, Logger: s.log, Prices: ru.prices, Stages: ru.stages,
		Replica: s.replica, Owner: s.owner, Calls: s.liveCalls, StaleCall: admit.StaleAfter,
		Charge: func(ctx context.Context, name, call string, used tenant.Amount) {
			s.rules.Load().ceilings.Charge(ctx, s.log, name, call, used)
		},
		ChargePerson: func(ctx context.Context, p *trajectory.Person, call string, micros int64) {
			if c := s.rules.Load().ceilings; c.People != nil && c.Ledger != nil {
				c.Charge(ctx, s.log, spendlimit.Book(p), call, tenant.Amount{Micros: micros})
			}
		},
		Swept: s.tel.CallsSwept})
	var ctx context.Context
	ctx, s.stopListen = context.WithCancel(context.Background())
	go func() {
		defer close(s.listening)
		done := make(chan struct{})
		go func() { defer close(done); s.sweeper.FinishIdle(ctx) }()
		calls := make(chan struct{})
		go func() { defer close(calls); s.sweeper.WatchCalls(ctx) }()
		defer func() { <-calls }()
		if sigs != nil {
			s.live.Listen(ctx, sigs, s.log)
		}
		<-done
	}()
	return s, nil
}

// Reload makes cfg, already validated, with gates, its compiled gates
// (nil: the approvals Service's), the rules of every request that begins
// from now on. A request already begun keeps the rules it began with to
// its end: its stream, its hold, its settle. A provider key kept by name
// keeps its rate-limit state; a removed key's calls in flight settle on
// it and nothing new goes to it. The store, the rate-limit scheduler and
// the approvals service stay those New was given, whatever cfg says of
// them: the caller refuses a cfg that changes the fields only a restart
// changes (config.Restarts).
func (s *Server) Reload(cfg *config.Config, gates *approvals.Gates) error {
	s.reloading.Lock()
	defer s.reloading.Unlock()
	old := s.rules.Load()
	ru, err := s.build(cfg, gates, old)
	if err != nil {
		return err
	}
	s.rules.Store(ru)
	s.sweeper.Use(ru.cfg, ru.prices, ru.stages)
	return nil
}

// build makes the rules of cfg, keeping old's rate-limit scheduler and
// redacting old's secrets too; old is nil at start.
func (s *Server) build(cfg *config.Config, gates *approvals.Gates, old *rules) (*rules, error) {
	opts := s.opts
	for _, tn := range cfg.Tenants {
		if tn.Limits != (config.TenantLimits{}) && s.ledger == nil {
			return nil, fmt.Errorf("proxy: tenant %s has limits, which need a Ledger", tn.Name)
		}
	}
	if len(cfg.Identity.Limits) > 0 && s.ledger == nil {
		return nil, errors.New("proxy: identity.limits need a Ledger")
	}
	ru := &rules{cfg: cfg, keys: wire.NewKeyring(cfg.Tenants), providers: make(map[string]*upstream), stages: meter.Thresholds(cfg.Stages)}
	if ru.people = s.peopleVerifier(cfg, old); ru.people != nil {
		var revoked signin.Revocations
		if cfg.Identity.Gateway.Enabled {
			revoked = s.opts.Revocations
		}
		ru.keys.AdmitPeople(ru.people, cfg.Tenants, revoked)
	}
	minOutput := cfg.BudgetMinOutputTokens
	if minOutput <= 0 {
		minOutput = config.DefaultBudgetMinOutputTokens
	}
	ru.prices = opts.Prices
	if ru.prices == nil {
		over := make(map[string]meter.Price, len(cfg.Prices))
		for k, p := range cfg.Prices {
			over[k] = meter.Price(p)
		}
		t, err := meter.DefaultTable().With(over)
		if err != nil {
			return nil, fmt.Errorf("proxy: prices: %w", err)
		}
		ru.prices = t
	}
	if old != nil {
		ru.secrets = slices.Clone(old.secrets)
	}
	for i := range cfg.Providers {
		p := &cfg.Providers[i]
		b, err := passthrough.Build(p, passthrough.Shared{Transport: s.transport, Buffers: s.bufs, Logger: s.log,
			Secrets: func() []string { return s.rules.Load().secrets }})
		if err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		up := &upstream{cfg: p, target: b.Target, api: b.API, pool: b.Pool, pass: b.Allow, rp: b.Proxy}
		for j := range p.Keys {
			if !slices.Contains(ru.secrets, p.Keys[j].Key) {
				ru.secrets = append(ru.secrets, p.Keys[j].Key)
			}
		}
		ru.providers[p.Name] = up
		if p.Default {
			ru.def = up
		}
	}
	if old != nil {
		ru.sched = old.sched
	}
	if ru.sched == nil {
		// The first config with a limited key starts the scheduler; the
		// rate_limits it reads stay those the process started with.
		ko := keys.Options{Buckets: opts.Buckets, StoreTimeout: opts.Config.Store.Timeout.Std(), RateLimits: opts.Config.RateLimits,
			Clock: s.now, Logger: s.log}
		for _, up := range ru.providers {
			ko.Pools = append(ko.Pools, up.pool)
		}
		if s.tel != nil {
			ko.Observer = s.tel
		}
		ru.sched = keys.NewScheduler(ko)
	}
	if opts.Approvals == nil && gates != nil && !gates.Empty() {
		return nil, errors.New("proxy: gates need the approvals service, which this process started without")
	}
	ru.esc = escrow.New(escrow.Config{Service: opts.Approvals, Gates: gates, Approvals: cfg.Approvals, Records: s.store,
		Stages: ru.stages, ToolDeadline: cfg.Limits.ToolDeadline.Std(), ReadOnly: escrow.ReadOnly(cfg.Tenants), Dialect: dialect.Stream,
		Signals: s.live, Closing: s.closing, Clock: s.now, Log: s.log, Metrics: s.tel})
	ru.records = &admit.Records{Store: s.store, Ledger: s.ledger, Now: s.now, Log: s.log, Tel: s.tel, MaxChildren: cfg.Limits.MaxChildren}
	ru.ceilings = &admit.Ceilings{Ledger: s.ledger, MinOutput: minOutput, Settles: s.settles, Log: s.log}
	if cfg.Identity.On() && s.ledger != nil && (len(cfg.Identity.Limits) > 0 || opts.SpendLimits != nil) {
		ru.ceilings.People = admit.NewPersonLimits(cfg.Identity, opts.SpendLimits, s.now)
	}
	ru.pass = &passthrough.Gate{Store: s.store, Scoped: ru.records.Scoped, MaxBody: cfg.Limits.MaxBodyBytes,
		BodyTimeout: cfg.Limits.BodyTimeout.Std(), Logger: s.log}
	ru.budget = &admit.Budget{Stages: ru.stages, MinOutput: minOutput, Owner: s.owner}
	return ru, nil
}

// Close waits, until ctx ends, for the charges still being retried to
// reach the store; call it after the HTTP server has shut down.
func (s *Server) Close(ctx context.Context) {
	s.EndHolds()
	s.stopListen()
	<-s.listening
	// The settles waiting behind replies are written before the key
	// buckets they correct close.
	s.behind.Close(ctx)
	s.rules.Load().sched.Close()
	s.settles.Close(ctx)
}

// EndStreams ends the calls still in flight in this process, as an
// operator's cancel ends a stream (the provider's error event, no half
// tool call) but leaving the run going, and waits until ctx ends for each
// to record its charge (estimated from what streamed). Call it when the
// HTTP server's shutdown grace ran out; it returns how many calls were
// still unrecorded when ctx ended, each of which logs its figures should
// its charge not reach the store.
func (s *Server) EndStreams(ctx context.Context) int {
	s.ending.Store(true)
	for _, t := range s.live.All() {
		t.stop(outcome.Shutdown)
	}
	for {
		left := len(s.live.All())
		if left == 0 || clock.Sleep(ctx, 10*time.Millisecond) != nil {
			return left
		}
	}
}

// EndHolds ends every wait on a held turn in this process: each held
// client's connection is dropped (a non-streamed one gets a 503), and the
// holds stay in the approvals store for the agents' retries, on another
// replica or after a restart. Register it with http.Server.RegisterOnShutdown:
// Shutdown does not cancel requests, and a held one may wait for minutes.
func (s *Server) EndHolds() { s.endHolds.Do(func() { close(s.closing) }) }

// Routes mounts the agent routes on r.
func (s *Server) Routes(r chi.Router) {
	r.Head("/", ok200)
	r.HandleFunc("/v1/*", func(w http.ResponseWriter, req *http.Request) {
		ru := s.rules.Load()
		if ru.def == nil {
			s.writeError(w, req, dialect.Unclaimed().API, nil, apierr.New(http.StatusNotFound, apierr.NotFound,
				"no default provider is configured: use /{provider}/v1/..."))
			return
		}
		s.serveProvider(w, req, ru, ru.def, "", req.URL.EscapedPath())
	})
	r.HandleFunc("/t/{trajectory}/{provider}", s.routeProvider)
	r.HandleFunc("/t/{trajectory}/{provider}/*", s.routeProvider)
	r.HandleFunc("/{provider}", s.routeProvider)
	r.HandleFunc("/{provider}/*", s.routeProvider)
}

func ok200(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }

func (s *Server) routeProvider(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "provider")
	ru := s.rules.Load()
	up, ok := ru.providers[name]
	if !ok {
		s.writeError(w, r, dialect.Unclaimed().API, nil, apierr.New(http.StatusNotFound, apierr.NotFound,
			fmt.Sprintf("no provider named %q is configured", name)))
		return
	}
	tid := chi.URLParam(r, "trajectory")
	rest, ok := wire.ProviderRest(r.URL.EscapedPath(), tid, name)
	if !ok {
		s.writeError(w, r, up.api, nil, apierr.New(http.StatusBadRequest, apierr.InvalidRequest, "malformed path"))
		return
	}
	s.serveProvider(w, r, ru, up, tid, rest)
}

// serveProvider handles one request for provider up; rest is the escaped
// path below the provider prefix ("/v1/messages"), as the agent spelled it;
// up is one of ru's providers, and ru the request's rules to its end.
func (s *Server) serveProvider(w http.ResponseWriter, r *http.Request, ru *rules, up *upstream, tid, rest string) {
	in, err := wire.Check(r, ru.keys, up.cfg.API, tid, rest)
	d := dialect.Turn(up.cfg.API, r.Method, in.Path)
	var api streaming.API
	if d != nil {
		api = d.API
	}
	if err != nil {
		// Every refusal before the body is read closes the connection: the
		// server would otherwise wait for the rest of the body, however
		// slowly it comes, before reading the next request.
		var known *request
		if in.Tenant != nil {
			known = &request{rules: ru, tenant: in.Tenant, id: requestID(r)}
		}
		s.writeError(w, r, cmp.Or(api, up.api), known, apierr.Closing(err))
		return
	}
	if in.Probe {
		w.WriteHeader(http.StatusOK)
		return
	}
	if in.Tenant != nil {
		// A virtual key: the connection is an agent's, no longer one of
		// those capped for not having authenticated.
		conncap.Trust(r.Context())
	}
	if in.Person != nil {
		r = r.WithContext(admit.WithPerson(r.Context(), in.Person))
	}
	req := &request{rules: ru, up: up, rest: in.Path, tenant: in.Tenant, keyHash: in.KeyHash, person: in.Person, trajectoryID: tid, run: tid, api: api, dialect: d, id: requestID(r)}
	if in.Tenant.Forwards() {
		req.own, req.ownQuery = wire.Credentials(r), wire.QueryCredential(r.URL.RawQuery)
	}
	w.Header().Set("X-Gatekeeper-Request-Id", req.id)
	if api == "" {
		s.passThrough(w, r, req)
		return
	}
	if err := s.serveTurn(w, r, req); err != nil {
		s.writeError(w, r, api, req, err)
	}
}

// request is what routing learned about one agent request.
type request struct {
	rules        *rules // the config's rules the request began under
	up           *upstream
	rest         string // canonical escaped path below the provider prefix
	query        string // a continuation's query; "" for an agent's request, whose own is forwarded
	tenant       *config.Tenant
	keyHash      [32]byte
	person       *trajectory.Person // who signed in; nil for a virtual key
	trajectoryID string             // from the path; "" when none
	run          string             // the record the request was placed on, once known; "" before
	api          streaming.API
	// dialect is api's row of the turn APIs' table, looked up once when
	// the request is routed; nil for a request that is no turn.
	dialect *dialect.Spec
	id      string // the request id in logs and X-Gatekeeper-Request-Id
	// own are the agent's provider credentials when its tenant sends them
	// on (tenants[].credentials: forward; wire.Credentials), nil
	// otherwise; ownQuery is the part of its query that carries one, for
	// a held turn's continuation. Kept in memory only: they are redacted
	// from the provider's error replies and never logged or stored.
	own      []string
	ownQuery string
}

// keyTurn is a call's use of provider up's key pool: none, for a tenant
// whose agents send their own credential (the pool's limits count only
// the keys gatekeeper holds; the provider's own 429s reach the agent as
// usual), else a turn of the scheduler in the tenant's priority class.
func (req *request) keyTurn(up *upstream) *keys.Turn {
	if req.tenant.Forwards() {
		return keys.Unscheduled(up.pool)
	}
	return req.rules.sched.Turn(up.pool, req.tenant.Priority)
}

// redacted are the credentials taken out of the provider's error replies
// to req: every provider key of the config, and the agent's own.
func (req *request) redacted() []string {
	if req.own == nil {
		return req.rules.secrets
	}
	return slices.Concat(req.rules.secrets, req.own)
}

// requestID is the agent's X-Request-Id when it is a plain token, else a
// new one: it ties gatekeeper's log lines to the agent's request.
func requestID(r *http.Request) string {
	if v := r.Header.Get("X-Request-Id"); len(v) > 0 && len(v) <= 64 && trajectory.ValidID(v) {
		return v
	}
	return "req_" + admit.NewCallID()
}
