package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// maxLabelValues bounds the distinct values one label takes in a process
// (per tenant, for the labels a tenant's requests choose: see perTenant);
// later values are reported as otherLabel, so a client sending a new model
// name per request cannot grow the exposition without bound.
const (
	maxLabelValues = 100
	otherLabel     = "other"
)

// Bucket boundaries: the GenAI conventions' advice for the gen_ai.client.*
// histograms, and seconds-scale ones for gatekeeper's own (the SDK's
// defaults are meant for milliseconds).
var (
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92, 163.84, 327.68, 655.36}
	ttftBuckets     = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60}
	waitBuckets     = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	decisionBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400}
)

// instruments are the process's meters, each created once by New.
type instruments struct {
	turns            metric.Int64Counter
	tokens           metric.Int64Counter
	dollars          metric.Float64Counter
	tokenUsage       metric.Int64Histogram   // gen_ai.client.token.usage
	operation        metric.Float64Histogram // gen_ai.client.operation.duration
	ttft             metric.Float64Histogram
	turnDuration     metric.Float64Histogram
	trajectories     metric.Int64UpDownCounter
	stageTransitions metric.Int64Counter
	approvalsPending metric.Int64UpDownCounter
	approvalDecision metric.Float64Histogram
	queueWait        metric.Float64Histogram
	upstreamErrors   metric.Int64Counter
	queueLength      metric.Int64Gauge
	headroom         metric.Float64Gauge
	keyRetries       metric.Int64Counter
	rateLimited      metric.Int64Counter
	refusals         metric.Int64Counter
	configReloads    metric.Int64Counter
	ops              *operations

	// One bound per label that takes values from outside the config; the
	// values a tenant's requests choose are bounded per tenant.
	tenants, providers, servers, states, errTypes, gates, outcomes, classes, keys, reasons *bounded
	models, stops                                                                          *perTenant
	// people bounds the person label to telemetry.metrics_people values;
	// nil leaves it out. groups bounds the group label, whose values the
	// config names (identity.groups).
	people, groups *bounded

	series *seriesCache
	// The label sets of the metrics a turn moves outside its series.
	trajectorySets labelCache[tenantState]
	queueWaitSets  labelCache[string] // by class
	headroomSets   labelCache[string] // by key
}

// tenantState is a trajectories gauge's series: a tenant and a state.
type tenantState struct{ tenant, state string }

func newInstruments(m metric.Meter, people int) (*instruments, error) {
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	in := &instruments{
		models: newPerTenant(), stops: newPerTenant(), tenants: newBounded(), providers: newBounded(), servers: newBounded(),
		series: &seriesCache{},
		states: newBounded(), errTypes: newBounded(), gates: newBounded(), outcomes: newBounded(), classes: newBounded(),
		keys: newBounded(), reasons: newBounded(), groups: newBounded(),
	}
	if people > 0 {
		in.people = newBoundedTo(people)
	}
	var err error
	in.turns, err = m.Int64Counter("gatekeeper.turns",
		metric.WithDescription("Model calls finished, by how they stopped."))
	check(err)
	in.tokens, err = m.Int64Counter("gatekeeper.tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens used, by type: input, cached_input, cache_write, output."))
	check(err)
	in.dollars, err = m.Float64Counter("gatekeeper.dollars",
		metric.WithDescription("Cost of the model calls in US dollars, estimated ones included."))
	check(err)
	in.tokenUsage, err = m.Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
		metric.WithDescription("Number of input and output tokens used."),
		metric.WithExplicitBucketBoundaries(tokenBuckets...))
	check(err)
	in.operation, err = m.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("GenAI operation duration."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	check(err)
	in.ttft, err = m.Float64Histogram("gatekeeper.time_to_first_token", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of a model call to the first byte of its reply."),
		metric.WithExplicitBucketBoundaries(ttftBuckets...))
	check(err)
	in.turnDuration, err = m.Float64Histogram("gatekeeper.turn_duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of a model call, to the end of its reply."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	check(err)
	in.trajectories, err = m.Int64UpDownCounter("gatekeeper.trajectories",
		metric.WithDescription("Trajectories by state."))
	check(err)
	in.stageTransitions, err = m.Int64Counter("gatekeeper.budget_stage_transitions",
		metric.WithDescription("Budget escalation stage changes."))
	check(err)
	in.approvalsPending, err = m.Int64UpDownCounter("gatekeeper.approvals_pending",
		metric.WithDescription("Tool calls waiting for an approval decision."))
	check(err)
	in.approvalDecision, err = m.Float64Histogram("gatekeeper.approval_decision", metric.WithUnit("s"),
		metric.WithDescription("Time from a hold to its approval decision."),
		metric.WithExplicitBucketBoundaries(decisionBuckets...))
	check(err)
	in.queueWait, err = m.Float64Histogram("gatekeeper.ratelimit_queue_wait", metric.WithUnit("s"),
		metric.WithDescription("Time a request waited for provider rate-limit capacity."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	check(err)
	in.upstreamErrors, err = m.Int64Counter("gatekeeper.upstream_errors",
		metric.WithDescription("Failed upstream calls, by error type."))
	check(err)
	in.queueLength, err = m.Int64Gauge("gatekeeper.ratelimit_queue_length",
		metric.WithDescription("Requests waiting for provider rate-limit capacity, by priority class."))
	check(err)
	in.headroom, err = m.Float64Gauge("gatekeeper.ratelimit_headroom",
		metric.WithDescription("Share of a provider key's tightest rate limit left (0 to 1; 0 while the key is cooled after a 429)."))
	check(err)
	in.keyRetries, err = m.Int64Counter("gatekeeper.ratelimit_key_retries",
		metric.WithDescription("Requests the provider refused (429, 529, 503, no connection) before any byte reached the agent, sent again on another key."))
	check(err)
	in.rateLimited, err = m.Int64Counter("gatekeeper.ratelimit_rejections",
		metric.WithDescription("Requests answered rate_limited after waiting rate_limits.max_wait for key capacity, by priority class."))
	check(err)
	in.refusals, err = m.Int64Counter("gatekeeper.refusals",
		metric.WithDescription("Requests gatekeeper answered with an error of its own, by reason."))
	check(err)
	in.configReloads, err = m.Int64Counter("gatekeeper.config_reloads",
		metric.WithDescription("Config reloads, by result: applied, or refused with the running config kept."))
	check(err)
	in.ops, err = newOperations(m)
	check(err)
	if len(errs) > 0 {
		return nil, fmt.Errorf("telemetry: instruments: %w", errors.Join(errs...))
	}
	// The held calls' gauge exists at 0 before the first hold, so that an
	// alert on it sees a value on every replica.
	in.approvalsPending.Add(context.Background(), 0)
	return in, nil
}

// bounded admits the first limit (maxLabelValues unless told) distinct
// values of a label and maps every later one to otherLabel.
type bounded struct {
	limit int
	mu    sync.RWMutex
	seen  map[string]struct{}
}

func newBounded() *bounded { return newBoundedTo(maxLabelValues) }

func newBoundedTo(limit int) *bounded {
	return &bounded{limit: limit, seen: make(map[string]struct{})}
}

func (b *bounded) value(v string) string {
	b.mu.RLock()
	_, ok := b.seen[v]
	full := len(b.seen) >= b.limit
	b.mu.RUnlock()
	switch {
	case ok:
		return v
	case full:
		return otherLabel
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen[v]; ok {
		return v
	}
	if len(b.seen) >= b.limit {
		return otherLabel
	}
	b.seen[v] = struct{}{}
	return v
}

// perTenant bounds a label separately for each tenant: a tenant inventing
// model names fills its own maxLabelValues and then reports otherLabel,
// while every other tenant keeps its own values. The tenants are themselves
// a bounded label, so the whole stays bounded (at most maxLabelValues+1
// tenants of maxLabelValues+1 values).
type perTenant struct {
	mu sync.RWMutex
	by map[string]*bounded // by bounded tenant label
}

func newPerTenant() *perTenant { return &perTenant{by: make(map[string]*bounded)} }

// value is v bounded within tenant, which must already be a bounded
// tenant label.
func (p *perTenant) value(tenant, v string) string {
	p.mu.RLock()
	b := p.by[tenant]
	p.mu.RUnlock()
	if b == nil {
		p.mu.Lock()
		if b = p.by[tenant]; b == nil {
			b = newBounded()
			p.by[tenant] = b
		}
		p.mu.Unlock()
	}
	return b.value(v)
}

// StageChanged counts a trajectory's move between budget stages.
func (t *Telemetry) StageChanged(tenant, from, to string) {
	if t == nil {
		return
	}
	m := t.m
	t.m.stageTransitions.Add(context.Background(), 1, metric.WithAttributes(
		labelTenant.String(m.tenants.value(tenant)),
		labelFrom.String(m.states.value(from)),
		labelTo.String(m.states.value(to))))
}

// StateChanged moves one trajectory between states on the trajectories
// gauge: from loses one, to gains one; "" stands for no state (created or
// forgotten).
func (t *Telemetry) StateChanged(tenant, from, to string) {
	if t == nil || from == to {
		return
	}
	m := t.m
	tenant = m.tenants.value(tenant)
	if from != "" {
		m.trajectories.Add(context.Background(), -1, m.trajectoryLabels(tenant, m.states.value(from)).add...)
	}
	if to != "" {
		m.trajectories.Add(context.Background(), 1, m.trajectoryLabels(tenant, m.states.value(to)).add...)
	}
}

// trajectoryLabels is the trajectories gauge's label set of a tenant and
// a state, both bounded.
func (m *instruments) trajectoryLabels(tenant, state string) labels {
	return m.trajectorySets.get(tenantState{tenant, state}, func() []attribute.KeyValue {
		return []attribute.KeyValue{labelTenant.String(tenant), labelState.String(state)}
	})
}

// UpstreamError counts a failed upstream call.
func (t *Telemetry) UpstreamError(provider, errType string) {
	if t == nil {
		return
	}
	m := t.m
	m.upstreamErrors.Add(context.Background(), 1, metric.WithAttributes(
		labelProvider.String(m.providers.value(provider)),
		labelType.String(m.errTypes.value(errType))))
}

// Refused counts a request of tenant (a configured tenant's name, "" when
// none was known) that gatekeeper answered with an error of its own;
// reason is one of a closed set the caller keeps.
func (t *Telemetry) Refused(tenant, reason string) {
	if t == nil {
		return
	}
	m := t.m
	m.refusals.Add(context.Background(), 1, metric.WithAttributes(
		labelTenant.String(m.tenants.value(tenant)),
		labelReason.String(m.reasons.value(reason))))
}

// ApprovalPending moves the gauge of held tool calls by delta.
func (t *Telemetry) ApprovalPending(delta int64) {
	if t == nil {
		return
	}
	t.m.approvalsPending.Add(context.Background(), delta)
}

// ApprovalDecided records how long a held call waited for its decision.
func (t *Telemetry) ApprovalDecided(gate, outcome string, latency time.Duration) {
	if t == nil {
		return
	}
	m := t.m
	m.approvalDecision.Record(context.Background(), latency.Seconds(), metric.WithAttributes(
		labelGate.String(m.gates.value(gate)),
		labelOutcome.String(m.outcomes.value(outcome))))
}

// Config reload results (ConfigReloaded).
const (
	ReloadApplied = "applied"
	ReloadRefused = "refused"
)

// ConfigReloaded counts a config reload by its result, ReloadApplied or
// ReloadRefused.
func (t *Telemetry) ConfigReloaded(result string) {
	if t == nil {
		return
	}
	t.m.configReloads.Add(context.Background(), 1, metric.WithAttributes(labelResult.String(result)))
}

// QueueWait records how long a request of a priority class waited for
// rate-limit capacity.
func (t *Telemetry) QueueWait(class string, d time.Duration) {
	if t == nil {
		return
	}
	m := t.m
	class = m.classes.value(class)
	l := m.queueWaitSets.get(class, func() []attribute.KeyValue { return []attribute.KeyValue{labelClass.String(class)} })
	m.queueWait.Record(context.Background(), d.Seconds(), l.rec...)
}
