package config

import "time"

// Config is the whole of config.yaml. Field names in YAML and JSON are
// snake_case; a Config marshalled either way reads back as the same file.
type Config struct {
	Listen string `yaml:"listen" json:"listen"`
	// TLS, when set, makes gatekeeper serve HTTPS on Listen.
	TLS       TLS              `yaml:"tls" json:"tls"`
	Store     Store            `yaml:"store" json:"store"`
	Providers []Provider       `yaml:"providers" json:"providers"`
	Prices    map[string]Price `yaml:"prices" json:"prices"`
	Tenants   []Tenant         `yaml:"tenants" json:"tenants"`
	Admin     Admin            `yaml:"admin" json:"admin"`
	Limits    Limits           `yaml:"limits" json:"limits"`
	Stages    Stages           `yaml:"budget_stages" json:"budget_stages"`
	// BudgetMinOutputTokens is the least output a call is worth starting
	// for: a call whose budget cannot pay for its input and this much
	// output is refused instead of clamped.
	BudgetMinOutputTokens int64      `yaml:"budget_min_output_tokens" json:"budget_min_output_tokens"`
	Log                   Log        `yaml:"log" json:"log"`
	Telemetry             Telemetry  `yaml:"telemetry" json:"telemetry"`
	RateLimits            RateLimits `yaml:"rate_limits" json:"rate_limits"`
	Gates                 []Gate     `yaml:"gates" json:"gates"`
	Approvals             Approvals  `yaml:"approvals" json:"approvals"`
	// Watchdog is the loop watchdog of every tenant (watchdog.go).
	Watchdog Watchdog `yaml:"watchdog" json:"watchdog"`
	// Identity lets people sign in with an OpenID Connect provider
	// (identity.go).
	Identity Identity `yaml:"identity" json:"identity"`
	// ShutdownGrace is how long a stopping gatekeeper lets open streams
	// finish; past it they are ended as an operator's cancel ends them and
	// charged as estimated.
	ShutdownGrace Duration `yaml:"shutdown_grace" json:"shutdown_grace"`

	// env records, by field path, which variables each expanded value came
	// from, so Validate can say "TEAM_A_KEY is not set" instead of a bare
	// "empty". It holds variable names only, never values.
	env map[string]envSource
}

// TLS is the listener's certificate and key, PEM files both set or both
// empty (plain HTTP). The files are read again when they change, without
// a restart.
type TLS struct {
	CertFile string `yaml:"cert_file" json:"cert_file"`
	KeyFile  string `yaml:"key_file" json:"key_file"`
}

// On reports whether the listener serves HTTPS.
func (t TLS) On() bool { return t.CertFile != "" || t.KeyFile != "" }

// Store kinds.
const (
	StoreMemory = "memory" // embedded, single process
	StoreRedis  = "redis"  // shared by every replica
)

// Store says where records, meters and events live.
type Store struct {
	Kind     string `yaml:"kind" json:"kind"`
	RedisURL string `yaml:"redis_url" json:"redis_url"`
	// RedisCluster says RedisURL names a Redis Cluster, in go-redis's
	// cluster URL form: redis://[:password@]host:port?addr=host:port&...
	RedisCluster bool `yaml:"redis_cluster" json:"redis_cluster"`
	// Retention is how long a finished trajectory's record and events are
	// kept. It must be positive: an unbounded memory store is a leak.
	Retention Duration `yaml:"retention" json:"retention"`
	// IdleRetention is how long a run none of whose records is busy, some
	// idle (READY or WAITING_TOOL), is kept after its last write; it must
	// be positive: records are free to create.
	IdleRetention Duration `yaml:"idle_retention" json:"idle_retention"`
	// Timeout bounds the store calls on a request's path: a turn waits at
	// most this for all the calls that admit it together, then is told to
	// retry (503); every other store call waits at most this.
	Timeout Duration `yaml:"timeout" json:"timeout"`
	// Heartbeat is how often a replica says its calls in flight are alive
	// (with the output streamed so far) and sweeps the store for calls
	// whose replica went silent for LostBeats heartbeats.
	Heartbeat Duration `yaml:"heartbeat" json:"heartbeat"`
	// SettleWindow is how long, on Redis, a turn's settle may wait to be
	// written behind the reply: the thread's next admission on this
	// replica carries it, or a flush every window writes what is left in
	// one batch. 0 writes each settle before the reply ends. The memory
	// store always settles at once: a settle there costs no round trip.
	SettleWindow Duration `yaml:"settle_window" json:"settle_window"`
}

// LostBeats is how many heartbeats a call's replica may miss before the
// call is taken for lost.
const LostBeats = 3

// Provider APIs.
const (
	APIAnthropic = "anthropic"
	APIOpenAI    = "openai"
	APIGemini    = "gemini"
)

// MockBaseURL as a provider's base_url means the built-in mock provider,
// started in-process by `serve`, so the quick start needs no network.
const MockBaseURL = "mock"

// Provider is one upstream: its name is also its path prefix (/{name}/v1/...).
type Provider struct {
	Name    string `yaml:"name" json:"name"`
	API     string `yaml:"api" json:"api"`
	BaseURL string `yaml:"base_url" json:"base_url"`
	// Default makes the provider also serve /v1/... at the root.
	Default bool          `yaml:"default" json:"default"`
	Keys    []ProviderKey `yaml:"keys" json:"keys"`
	// Passthrough are the requests, besides turns and the built-in
	// allowlist (model listing and retrieval, Anthropic token counting),
	// that gatekeeper forwards to this provider unmetered. Anything else
	// is refused: pass-through spends the shared provider key.
	Passthrough []Passthrough `yaml:"passthrough" json:"passthrough"`
}

// Passthrough allows one kind of non-turn request: an HTTP method and a
// path pattern in Go's path.Match syntax ("*" matches one segment), e.g.
// {method: GET, path: /v1/files/*}.
type Passthrough struct {
	Method string `yaml:"method" json:"method"`
	Path   string `yaml:"path" json:"path"`
}

// Mock reports whether the provider is the built-in mock.
func (p Provider) Mock() bool { return p.BaseURL == MockBaseURL }

// ProviderKey is one real provider key of a provider's pool and its rate
// limits. A zero limit means the provider's own limit is the only one.
// The bursts are what the key's bucket in each limit holds, 0 meaning one
// second of the limit (at least one): the providers enforce per-minute
// limits over such short intervals.
type ProviderKey struct {
	Name           string `yaml:"name" json:"name"`
	Key            string `yaml:"key" json:"key"`
	RPM            int    `yaml:"rpm" json:"rpm"`
	InputTPM       int64  `yaml:"input_tpm" json:"input_tpm"`
	OutputTPM      int64  `yaml:"output_tpm" json:"output_tpm"`
	RPMBurst       int    `yaml:"rpm_burst" json:"rpm_burst"`
	InputTPMBurst  int64  `yaml:"input_tpm_burst" json:"input_tpm_burst"`
	OutputTPMBurst int64  `yaml:"output_tpm_burst" json:"output_tpm_burst"`
	// Organization and Project, when set, are sent as OpenAI-Organization
	// and OpenAI-Project with this key; an agent's own are always dropped.
	Organization string `yaml:"organization" json:"organization"`
	Project      string `yaml:"project" json:"project"`
}

// Price is what a model costs, in USD per million tokens.
type Price struct {
	Input       float64 `yaml:"input" json:"input"`
	CachedInput float64 `yaml:"cached_input" json:"cached_input"`
	CacheWrite  float64 `yaml:"cache_write" json:"cache_write"`
	Output      float64 `yaml:"output" json:"output"`
	// CacheWrite1h prices cache writes kept for an hour (Anthropic); 0
	// prices them as CacheWrite.
	CacheWrite1h float64 `yaml:"cache_write_1h" json:"cache_write_1h,omitempty"`
}

// Priority classes of tenants, most urgent first.
const (
	PriorityInteractive = "interactive"
	PriorityStandard    = "standard"
	PriorityBatch       = "batch"
)

// Tenant is a group of agents sharing virtual keys, a priority class and a
// default budget.
type Tenant struct {
	Name string `yaml:"name" json:"name"`
	// Keys are the virtual keys the tenant's agents present, each either the
	// key itself or "sha256:" followed by the 64 lowercase hex digits of its
	// SHA-256, so a config file need not hold the key at all.
	Keys          []string   `yaml:"keys" json:"keys"`
	Priority      string     `yaml:"priority" json:"priority"`
	Budget        Budget     `yaml:"budget" json:"budget"`
	CallLimits    CallLimits `yaml:"call_limits" json:"call_limits"`
	ReadOnlyTools []string   `yaml:"read_only_tools" json:"read_only_tools"`
	// AnthropicBeta, when not empty, lists the anthropic-beta values the
	// tenant's requests may carry; a request naming another is refused.
	// Empty (the default) forwards every beta, as Claude Code needs.
	AnthropicBeta []string `yaml:"anthropic_beta" json:"anthropic_beta"`
	// MaxInputTokens is the input a call is taken to have when its body
	// references content by id or URL, or history the provider keeps, so
	// that its size says nothing of its input: its worst case counts this
	// many input tokens at least. 0: DefaultHiddenInputTokens.
	MaxInputTokens int64 `yaml:"max_input_tokens" json:"max_input_tokens"`
	// MaxTruncations ends a run whose replies were cut at their output
	// limit that many times in a row (exit reason TRUNCATION_LOOP); 0 means
	// the default, a negative value never ends a run for it.
	MaxTruncations int `yaml:"max_truncations" json:"max_truncations"`
	// RefuseUngatedMCP refuses a Responses request declaring a hosted MCP
	// tool that never asks for approval: the provider runs its calls
	// itself, where no gate can hold them.
	RefuseUngatedMCP bool `yaml:"refuse_ungated_mcp" json:"refuse_ungated_mcp"`
	// Limits bound the tenant as a whole, across all its runs and every
	// replica; zero means no bound.
	Limits TenantLimits `yaml:"limits" json:"limits"`
	// Trajectories says who may start a run: TrajectoriesAgents (any
	// request may, the default) or TrajectoriesOperators (only an
	// operator, through the admin API; requests must name such a run).
	Trajectories string `yaml:"trajectories" json:"trajectories"`
	// Watchdog, when set, overrides the fields of the top-level watchdog
	// it sets, for this tenant's runs (Config.WatchdogFor).
	Watchdog *Watchdog `yaml:"watchdog" json:"watchdog,omitempty"`
	// Credentials says whose credential a tenant's calls reach the
	// provider with: CredentialsPool (a key of the provider's pool, the
	// default) or CredentialsForward (the agent's own, sent on
	// unchanged; the tenant is then named by its virtual key in
	// X-Gatekeeper-Key).
	Credentials string `yaml:"credentials" json:"credentials"`
}

// Whose credential a tenant's calls use (tenants[].credentials).
const (
	CredentialsPool    = "pool"
	CredentialsForward = "forward"
)

// Forwards reports whether the tenant's calls go to the provider with
// the agent's own credential rather than a pool key.
func (t *Tenant) Forwards() bool { return t.Credentials == CredentialsForward }

// Who may start a tenant's runs (tenants[].trajectories).
const (
	TrajectoriesAgents    = "agents"
	TrajectoriesOperators = "operators"
)

// TenantLimits are a tenant's ceilings over rolling windows, summed over
// all its runs: a run cannot escape them by starting over. Zero means no
// ceiling.
type TenantLimits struct {
	// DollarsPerDay and TokensPerDay bound the last 24 hours' spend,
	// DollarsPerMonth the last 30 days'.
	DollarsPerDay   float64 `yaml:"dollars_per_day" json:"dollars_per_day"`
	DollarsPerMonth float64 `yaml:"dollars_per_month" json:"dollars_per_month"`
	TokensPerDay    int64   `yaml:"tokens_per_day" json:"tokens_per_day"`
	// MaxLiveTrajectories bounds the runs not yet finished;
	// NewTrajectoriesPerHour the runs started in the last hour; the runs
	// operators create count as agents' do.
	MaxLiveTrajectories    int `yaml:"max_live_trajectories" json:"max_live_trajectories"`
	NewTrajectoriesPerHour int `yaml:"new_trajectories_per_hour" json:"new_trajectories_per_hour"`
}

// Budget is a trajectory's default ceiling per dimension; zero means no
// ceiling on that dimension.
type Budget struct {
	Turns     int      `yaml:"turns" json:"turns"`
	Tokens    int64    `yaml:"tokens" json:"tokens"`
	WallClock Duration `yaml:"wall_clock" json:"wall_clock"`
	Dollars   float64  `yaml:"dollars" json:"dollars"`
	// OnExhaust is what a run does when its budget cannot pay for its next
	// call: "fail" (default) or "pause".
	OnExhaust string `yaml:"on_exhaust" json:"on_exhaust"`
}

// CallLimits bound every single model call of a tenant; zero means no bound.
type CallLimits struct {
	MaxOutputTokens int      `yaml:"max_output_tokens" json:"max_output_tokens"`
	CallDeadline    Duration `yaml:"call_deadline" json:"call_deadline"`
}

// Admin roles. A custom approver role has the form "approver:<group>".
const (
	RoleOperator = "operator"
	RoleApprover = "approver"
)

// Admin holds the bearer tokens of the admin API.
type Admin struct {
	Tokens []AdminToken `yaml:"tokens" json:"tokens"`
}

// AdminToken is one person's or one script's admin credential.
type AdminToken struct {
	Name  string   `yaml:"name" json:"name"`
	Token string   `yaml:"token" json:"token"`
	Roles []string `yaml:"roles" json:"roles"`
	// Tenants, when set, are the only tenants whose runs, approvals,
	// events and reports the token sees or acts on; another tenant's are
	// absent to it. Unset: every tenant.
	Tenants []string `yaml:"tenants" json:"tenants,omitempty"`
}

// Limits bound what gatekeeper accepts from outside.
type Limits struct {
	MaxBodyBytes  int64 `yaml:"max_body_bytes" json:"max_body_bytes"`
	MaxEventBytes int64 `yaml:"max_event_bytes" json:"max_event_bytes"`
	// ToolDeadline is how long a delivered tool call may stay unanswered.
	ToolDeadline Duration `yaml:"tool_deadline" json:"tool_deadline"`
	// IdleFinish finishes a trajectory idle that long; zero turns it off.
	IdleFinish Duration `yaml:"idle_finish" json:"idle_finish"`
	// PauseHold is how long a request of a paused trajectory is held before
	// it is answered trajectory_paused; below the agents' idle timeouts.
	PauseHold Duration `yaml:"pause_hold" json:"pause_hold"`
	// BodyTimeout bounds the wait for an agent's request body: each period
	// must bring at least BodyProgressBytes of it (the whole rest when
	// less), or the request is answered 408 and its connection closed.
	BodyTimeout Duration `yaml:"body_timeout" json:"body_timeout"`
	// HeaderTimeout bounds the wait for a request's headers, IdleTimeout
	// how long a keep-alive connection may wait for its next request.
	HeaderTimeout Duration `yaml:"header_timeout" json:"header_timeout"`
	IdleTimeout   Duration `yaml:"idle_timeout" json:"idle_timeout"`
	// MaxPendingConnections caps the connections on which no request has
	// authenticated yet; past it the oldest is closed. 0: a quarter of
	// the process's open-file limit (between 16 and 4096).
	MaxPendingConnections int `yaml:"max_pending_connections" json:"max_pending_connections"`
	// MaxChildren bounds a record's child records (threads, subagents);
	// further threads share its last child.
	MaxChildren int `yaml:"max_children" json:"max_children"`
}

// BodyProgressBytes is how much of a request body must arrive within each
// limits.body_timeout: a trickle of a few bytes never keeps a connection.
const BodyProgressBytes = 4096

// Stages are the values of ρ (used/ceiling, the tightest budget dimension)
// at which each escalation stage starts.
type Stages struct {
	Steer    float64 `yaml:"steer" json:"steer"`
	Restrict float64 `yaml:"restrict" json:"restrict"`
	Halt     float64 `yaml:"halt" json:"halt"`
}

// Log levels and formats.
const (
	LogDebug = "debug"
	LogInfo  = "info"
	LogWarn  = "warn"
	LogError = "error"

	LogJSON = "json"
	LogText = "text"
)

// Log configures the process's structured log.
type Log struct {
	Level  string `yaml:"level" json:"level"`
	Format string `yaml:"format" json:"format"`
}

// Telemetry configures traces and metrics. Metrics are always served at
// /metrics; traces are exported only when turned on.
type Telemetry struct {
	// ServiceName is the service.name of every span and metric.
	ServiceName string `yaml:"service_name" json:"service_name"`
	Traces      Traces `yaml:"traces" json:"traces"`
	// MetricsToken, when set, is the bearer token /metrics requires; the
	// metrics name tenants, models and keys.
	MetricsToken string `yaml:"metrics_token" json:"metrics_token"`
	// MetricsPeople is how many distinct people the turn, token and dollar
	// metrics name in their person label, first come first named; later
	// people are counted as "other", and 0 leaves the label out. A person's
	// group label needs no bound: it is always a group identity.groups
	// names.
	MetricsPeople int `yaml:"metrics_people" json:"metrics_people"`
}

// Traces configures the OTLP export of one span per model call. Tracing is
// also turned on by the standard OTEL_EXPORTER_OTLP_ENDPOINT and
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT variables, and off by
// OTEL_SDK_DISABLED=true.
type Traces struct {
	Enabled bool `yaml:"enabled" json:"enabled"`
	// OTLPEndpoint is the full URL spans are posted to over OTLP/HTTP, e.g.
	// http://collector:4318/v1/traces; empty leaves it to the variables.
	OTLPEndpoint string `yaml:"otlp_endpoint" json:"otlp_endpoint"`
	// SampleRatio is the share of new traces recorded; a trace the agent
	// started keeps the agent's sampling decision.
	SampleRatio float64 `yaml:"sample_ratio" json:"sample_ratio"`
}

// RateLimits configures how turns share the provider keys' rate limits
// (providers[].keys[] rpm, input_tpm, output_tpm): a turn waits for key
// capacity in its tenant's priority class, the classes served in proportion
// to their weights.
type RateLimits struct {
	// MaxWait is how long a turn may queue for key capacity before the
	// agent is answered rate_limited with a Retry-After.
	MaxWait Duration `yaml:"max_wait" json:"max_wait"`
	// Weights are the shares of key capacity, in tokens, each priority
	// class gets while several classes wait. A class left out keeps its
	// default weight.
	Weights map[string]int `yaml:"weights" json:"weights"`
	// DefaultOutputTokens is the output a turn is estimated at when its
	// request names no output limit; the estimate is corrected by the
	// reply's usage.
	DefaultOutputTokens int64 `yaml:"default_output_tokens" json:"default_output_tokens"`
	// ExactTakes sends every turn's key take and settle to Redis. By
	// default a replica takes a slice of a roomy key ahead of its turns
	// and spends it in memory (see ratelimit's slices).
	ExactTakes bool `yaml:"exact_takes" json:"exact_takes"`
}

// Defaults that DefaultConfig fills in.
const (
	DefaultListen        = "127.0.0.1:8080"
	DefaultRetention     = 168 * time.Hour
	DefaultIdleRetention = 24 * time.Hour
	// A tenant whose limits do not name max_live_trajectories or
	// new_trajectories_per_hour is bounded by these; a written 0 means no
	// bound.
	// DefaultHiddenInputTokens is a tenant's max_input_tokens when it sets
	// none: the largest context window of the models priced.
	DefaultHiddenInputTokens      = 1_048_576
	DefaultMaxLiveTrajectories    = 5000
	DefaultNewTrajectoriesPerHour = 1000
	DefaultMaxChildren            = 1000
	DefaultStoreTimeout           = 2 * time.Second
	DefaultHeartbeat              = 10 * time.Second
	DefaultSettleWindow           = 2 * time.Millisecond
	DefaultShutdownGrace          = 30 * time.Second
	DefaultMaxBodyBytes           = 32 << 20
	DefaultMaxEventBytes          = 16 << 20
	DefaultToolDeadline           = 30 * time.Minute
	DefaultPauseHold              = 240 * time.Second
	DefaultBodyTimeout            = 60 * time.Second
	DefaultHeaderTimeout          = 30 * time.Second
	DefaultIdleTimeout            = 5 * time.Minute
	DefaultServiceName            = "gatekeeper"
	DefaultMetricsPeople          = 100
	MaxMetricsPeople              = 10000
	DefaultMaxWait                = 30 * time.Second
	DefaultOutputTokens           = 4096
	// DefaultBudgetMinOutputTokens is budget_min_output_tokens' default.
	DefaultBudgetMinOutputTokens = 1024
	// DefaultMaxTruncations is tenants[].max_truncations' default.
	DefaultMaxTruncations = 3
	// MaxMaxWait bounds rate_limits.max_wait: a turn held longer outlives
	// the agents' own request timeouts.
	MaxMaxWait = 10 * time.Minute
)

// DefaultWeights are the classes' default shares of key capacity.
func DefaultWeights() map[string]int {
	return map[string]int{PriorityInteractive: 4, PriorityStandard: 2, PriorityBatch: 1}
}

// DefaultConfig returns a config holding every default and nothing else: no
// providers, tenants or tokens, so it does not validate on its own.
func DefaultConfig() *Config {
	return &Config{
		Listen: DefaultListen,
		Store: Store{Kind: StoreMemory, Retention: Duration(DefaultRetention), IdleRetention: Duration(DefaultIdleRetention),
			Timeout: Duration(DefaultStoreTimeout), Heartbeat: Duration(DefaultHeartbeat),
			SettleWindow: Duration(DefaultSettleWindow)},
		ShutdownGrace: Duration(DefaultShutdownGrace),
		Limits: Limits{
			MaxBodyBytes:  DefaultMaxBodyBytes,
			MaxEventBytes: DefaultMaxEventBytes,
			ToolDeadline:  Duration(DefaultToolDeadline),
			PauseHold:     Duration(DefaultPauseHold),
			BodyTimeout:   Duration(DefaultBodyTimeout),
			HeaderTimeout: Duration(DefaultHeaderTimeout),
			IdleTimeout:   Duration(DefaultIdleTimeout),
			MaxChildren:   DefaultMaxChildren,
		},
		Stages:                Stages{Steer: 0.70, Restrict: 0.90, Halt: 1.00},
		BudgetMinOutputTokens: DefaultBudgetMinOutputTokens,
		Log:                   Log{Level: LogInfo, Format: LogJSON},
		Telemetry: Telemetry{
			ServiceName:   DefaultServiceName,
			Traces:        Traces{SampleRatio: 1},
			MetricsPeople: DefaultMetricsPeople,
		},
		Approvals: Approvals{
			Keepalive:    Duration(DefaultKeepalive),
			MaxPending:   DefaultMaxPending,
			MaxHeldBytes: DefaultMaxHeldBytes,
		},
		Watchdog: DefaultWatchdog(),
		Identity: Identity{GroupsClaim: DefaultGroupsClaim},
		RateLimits: RateLimits{
			MaxWait:             Duration(DefaultMaxWait),
			Weights:             DefaultWeights(),
			DefaultOutputTokens: DefaultOutputTokens,
		},
	}
}

// applyElementDefaults fills defaults inside list elements, which
// DefaultConfig cannot know of in advance.
func (c *Config) applyElementDefaults() {
	for i := range c.Tenants {
		if c.Tenants[i].Priority == "" {
			c.Tenants[i].Priority = PriorityStandard
		}
		if c.Tenants[i].MaxTruncations == 0 {
			c.Tenants[i].MaxTruncations = DefaultMaxTruncations
		}
		if c.Tenants[i].Trajectories == "" {
			c.Tenants[i].Trajectories = TrajectoriesAgents
		}
		if c.Tenants[i].Credentials == "" {
			c.Tenants[i].Credentials = CredentialsPool
		}
	}
	c.applyApprovalDefaults()
	if cs := c.Identity.Console; cs != nil {
		if cs.SessionLifetime == 0 {
			cs.SessionLifetime = Duration(DefaultSessionLifetime)
		}
		if cs.Scopes == nil {
			cs.Scopes = []string{"openid", "profile", "email", c.Identity.GroupsClaim}
		}
	}
}

// Provider returns the provider with that name.
func (c *Config) Provider(name string) (*Provider, bool) {
	for i := range c.Providers {
		if c.Providers[i].Name == name {
			return &c.Providers[i], true
		}
	}
	return nil, false
}

// DefaultProvider returns the provider marked `default: true`, which also
// serves the routes at the root. There is none unless one is marked.
func (c *Config) DefaultProvider() (*Provider, bool) {
	for i := range c.Providers {
		if c.Providers[i].Default {
			return &c.Providers[i], true
		}
	}
	return nil, false
}
