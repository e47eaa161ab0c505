package trajectory

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// StageNominal is the budget stage of a record no ceiling is pressing on.
const StageNominal = "nominal"

// Record is the trajectory's control block. Nothing the agent or the model
// sends changes it directly: state changes go through Transition and the
// turn helpers built on it. Its JSON form is the one the admin API returns
// (see json.go).
type Record struct {
	ID       string
	ParentID string // "" for a root
	Tenant   string
	State    State
	// ExitReason says why the run finished (BUDGET_EXCEEDED, killed...);
	// set by Finalize.
	ExitReason string
	// Turns counts this record's own model calls; Spend.Turns also counts
	// its descendants' once they are rolled up.
	Turns          int64
	LastStopReason string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	// CreatedBy is who created the record: an agent's request or an
	// operator through the admin API. A record saved before records kept
	// it has the zero Creator.
	CreatedBy Creator

	Budget           Budget
	Spend            Spend
	BudgetUsed       float64 // ρ: max over dimensions of used/ceiling
	BindingDimension string  // the dimension that sets BudgetUsed
	Stage            string

	Pending  Pending
	Children []string

	// Thread is the client agent id or conversation fingerprint this record
	// serves, when it is a thread of a larger run.
	Thread   string
	Provider string
	Model    string
	// StartedAt is the first turn's start; zero before it. Wall-clock spend
	// runs from here, not from creation, so a record made ahead of time by
	// an operator does not burn its wall-clock budget while idle.
	StartedAt time.Time

	// Reserved is what the calls in flight in this record's subtree hold
	// against its budget until they settle, so that parallel threads
	// cannot overshoot a ceiling together.
	Reserved Reservation
	// Call names this record's own call in flight, "" when none, and
	// CallReserved is what it reserved on every record of its chain. A
	// settle that finds another Call was already applied: a retried
	// settle never charges twice.
	Call         string
	CallReserved Reservation
	// SettledCall is the last call whose settle this record took: a settle
	// sent again after its answer was lost finds it here and knows its
	// charge was written.
	SettledCall string
	// CallOwner is the replica serving Call; CallBeat when it last said
	// the call was alive (at admission, then while the reply streams);
	// CallInput the call's input estimate in tokens and CallOutput the
	// output that had streamed by the last beat, in tokens estimated from
	// its bytes. A call whose beat is too old is taken for lost and
	// charged from these (docs/guide/budgets.md, "Calls in flight cannot leak").
	CallOwner  string
	CallBeat   time.Time
	CallInput  int64
	CallOutput int64
	// LostCalls are this record's calls taken for lost (their replica
	// gone) and reclaimed, most recent last: a reply that still arrives
	// for one of them is charged once, when its settle finds it here.
	LostCalls []string
	// SweptCalls are this record's calls taken for lost and charged as
	// estimated (by a sweep, or by the request that found the call
	// silent), most recent last: a reply that still arrives for one of
	// them replaces the estimate by its real charge, once, when its
	// settle finds it here.
	SweptCalls []SweptCall
	// FallbackPriced is set once a turn was charged at the fallback price
	// because the price table does not know its model.
	FallbackPriced bool

	// HeldSince is when the record entered PAUSED or AWAITING_APPROVAL,
	// zero outside them, and WaitedS the seconds of the holds it has left
	// since StartedAt: the agent spends no wall clock while an operator or
	// an approver keeps it waiting, so neither is charged.
	HeldSince time.Time
	WaitedS   float64

	// PauseReason is PauseBudget while the record is PAUSED because its
	// budget ran out (on_exhaust: pause); "" otherwise. Leaving PAUSED
	// clears it.
	PauseReason string
	// Truncations counts the turns whose reply was cut at its output
	// limit, and TruncationsInRow those since the last turn that was not.
	Truncations      int64
	TruncationsInRow int64

	// Outcome is how the run's work was judged (OutcomeAccepted,
	// OutcomeRejected; "" until someone says) and TaskClass what kind of
	// task it was: marked by an operator or by the agent's harness (see
	// outcome.go), read by cost reports.
	Outcome   string
	TaskClass string
	// Watch is the loop watchdog's state of this thread (watch.go).
	Watch Watch
	// Person started the run, when a person's token admitted it; nil for
	// a virtual key (person.go).
	Person *Person
}

// Creator is who created a record: an agent's request (Kind
// CreatorAgent, Name the tenant of its virtual key) or an operator
// through the admin API (CreatorOperator, Name the admin token's name).
type Creator struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// The kinds of Creator.
const (
	CreatorAgent    = "agent"
	CreatorOperator = "operator"
)

// Reservation is what calls in flight hold against a budget: their count,
// their estimated input plus output limit in tokens, and its price in
// micro-dollars.
type Reservation struct {
	Calls  int64 `json:"calls"`
	Tokens int64 `json:"tokens"`
	Micros int64 `json:"micros"`
}

// Add returns r plus o.
func (r Reservation) Add(o Reservation) Reservation {
	return Reservation{Calls: r.Calls + o.Calls, Tokens: r.Tokens + o.Tokens, Micros: r.Micros + o.Micros}
}

// Release returns r less o, never below zero: a settle that outlives a
// lost reservation must not leave a negative one behind.
func (r Reservation) Release(o Reservation) Reservation {
	return Reservation{Calls: max(r.Calls-o.Calls, 0), Tokens: max(r.Tokens-o.Tokens, 0), Micros: max(r.Micros-o.Micros, 0)}
}

// Budget holds the ceilings of a run. A zero dimension has no ceiling.
type Budget struct {
	Turns      int64   `json:"turns"`
	Tokens     int64   `json:"tokens"`
	WallClockS int64   `json:"wall_clock_s"`
	Dollars    float64 `json:"dollars"`
	// OnExhaust says what happens when the budget cannot pay for the next
	// call: OnExhaustFail ("" means it) or OnExhaustPause.
	OnExhaust string `json:"on_exhaust,omitempty"`
}

// What a run does when its budget is exhausted.
const (
	// OnExhaustFail ends the run FAILED with exit reason BUDGET_EXCEEDED.
	OnExhaustFail = "fail"
	// OnExhaustPause moves the run to PAUSED with reason PauseBudget until
	// an operator raises the budget (or resumes it as it is).
	OnExhaustPause = "pause"
)

// ValidOnExhaust reports whether s is an exhaustion policy ("" is fail).
func ValidOnExhaust(s string) bool { return s == "" || s == OnExhaustFail || s == OnExhaustPause }

// PauseBudget is the PauseReason of a run its budget paused.
const PauseBudget = "BUDGET"

// Spend is what a run has used, as the providers reported it. It includes
// the spend of the record's descendants once rolled up with AddSpend.
type Spend struct {
	Turns             int64   `json:"turns"`
	InputTokens       int64   `json:"input_tokens"`
	CachedInputTokens int64   `json:"cached_input_tokens"`
	CacheWriteTokens  int64   `json:"cache_write_tokens"`
	OutputTokens      int64   `json:"output_tokens"`
	Dollars           float64 `json:"dollars"`
	WallClockS        float64 `json:"wall_clock_s"`
	// Estimated is set once any charge was estimated (a stream cut before
	// its usage arrived) rather than reported.
	Estimated bool `json:"estimated"`
}

// SweptCall is a call taken for lost and the estimate it was charged:
// its input estimate and the output its last heartbeat reported.
type SweptCall struct {
	Call         string  `json:"call"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	Dollars      float64 `json:"dollars"`
}

// Tokens is every token counted in s, the quantity the tokens ceiling bounds.
func (s Spend) Tokens() int64 {
	return s.InputTokens + s.CachedInputTokens + s.CacheWriteTokens + s.OutputTokens
}

// Usage is one turn's token counts. Input is split so that the three input
// fields add up to the whole prompt; output includes reasoning.
type Usage struct {
	InputTokens       int64 `json:"input_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens"`
	CacheWriteTokens  int64 `json:"cache_write_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
	// CacheWrite1hTokens are the part of CacheWriteTokens written to the
	// cache for an hour rather than five minutes (Anthropic), priced apart.
	CacheWrite1hTokens int64 `json:"cache_write_1h_tokens,omitempty"`
	// ServiceTier is the tier the provider says served the call
	// ("priority", "flex", "batch"...); "" when it says none.
	ServiceTier string `json:"service_tier,omitempty"`
}

// Pending is the work a record waits on at the next turn boundary.
type Pending struct {
	// ToolCalls are the calls delivered to the agent (or held for approval)
	// whose results the next request must carry.
	ToolCalls  []PendingCall
	ApprovalID string
	// Control is an operator request not yet applied; it takes effect at
	// the next turn boundary.
	Control *Control
}

// PendingCall is one tool call the agent owes a result for.
type PendingCall struct {
	ID       string
	Name     string
	Deadline time.Time // zero: no deadline
}

// ControlKind names an operator request.
type ControlKind string

// The operator requests of the admin API.
const (
	ControlPause     ControlKind = "pause"
	ControlResume    ControlKind = "resume"
	ControlCancel    ControlKind = "cancel"
	ControlKill      ControlKind = "kill"
	ControlFinish    ControlKind = "finish"
	ControlInterrupt ControlKind = "interrupt"
)

// Control is an operator request waiting for a turn boundary.
type Control struct {
	Kind ControlKind `json:"kind"`
	// Message is the text an interrupt appends as a user message.
	Message string    `json:"message,omitempty"`
	By      string    `json:"by,omitempty"`
	At      time.Time `json:"at"`
}

// New returns a READY root record with no budget ceilings. Callers set
// ParentID, Budget and the rest before handing it to Store.Create.
func New(id, tenant string, now time.Time) *Record {
	return &Record{
		ID:        id,
		Tenant:    tenant,
		State:     Ready,
		CreatedAt: now,
		UpdatedAt: now,
		Stage:     StageNominal,
	}
}

// Validate checks what a store must refuse to save.
func (r *Record) Validate() error {
	switch {
	case r == nil:
		return fmt.Errorf("%w: nil record", ErrInvalidRecord)
	case r.ID == "":
		return fmt.Errorf("%w: empty id", ErrInvalidRecord)
	case r.ParentID == r.ID:
		return fmt.Errorf("%w: %q is its own parent", ErrInvalidRecord, r.ID)
	case !r.State.Valid():
		return fmt.Errorf("%w: %q has unknown state %q", ErrInvalidRecord, r.ID, r.State)
	case r.ParentID == "" && strings.Contains(r.ID, "/"):
		return fmt.Errorf("%w: root id %q contains a '/', which separates a child's id from its parent's", ErrInvalidRecord, r.ID)
	case r.ParentID != "" && !strings.HasPrefix(r.ID, r.ParentID+"/"):
		// A tree shares its root's prefix, so one id names its whole chain.
		return fmt.Errorf("%w: child id %q does not start with its parent's id %q and a '/'", ErrInvalidRecord, r.ID, r.ParentID)
	case strings.Count(r.ID, "/") >= MaxDepth:
		return fmt.Errorf("%w: %q is nested deeper than %d levels", ErrInvalidRecord, r.ID, MaxDepth)
	}
	return nil
}

// Clone returns a deep copy: changing it never changes r.
func (r *Record) Clone() *Record {
	c := r.Copy()
	return &c
}

// Copy is Clone as a value, for a caller that keeps it in place of
// another (a store's own copy) rather than behind a pointer of its own.
func (r *Record) Copy() Record {
	c := *r
	c.Children = slices.Clone(r.Children)
	c.Pending.ToolCalls = slices.Clone(r.Pending.ToolCalls)
	c.LostCalls = slices.Clone(r.LostCalls)
	c.SweptCalls = slices.Clone(r.SweptCalls)
	c.Watch = r.Watch.clone()
	c.Person = r.Person.Clone()
	if r.Pending.Control != nil {
		ctl := *r.Pending.Control
		c.Pending.Control = &ctl
	}
	return c
}

// AddSpend adds usage and dollars without a state change: it rolls a
// descendant's turn into an ancestor, whose ceilings the descendant's spend
// counts against. It leaves Turns and Spend.Turns alone because the caller
// decides whether the charge is a whole turn or a correction of one.
func (r *Record) AddSpend(u Usage, dollars float64, estimated bool) {
	r.Spend.InputTokens += u.InputTokens
	r.Spend.CachedInputTokens += u.CachedInputTokens
	r.Spend.CacheWriteTokens += u.CacheWriteTokens
	r.Spend.OutputTokens += u.OutputTokens
	r.Spend.Dollars += dollars
	r.Spend.Estimated = r.Spend.Estimated || estimated
}

// ValidID reports whether id may name a trajectory chosen by an operator
// or an agent: 1-128 characters of A-Z a-z 0-9 . _ : - (thread records add
// "/" and "~" themselves).
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// TenantScoped is the id under which tenant keeps a run it names id when
// another tenant already has a run of that name: its root part gets
// "@tenant", which no agent or operator can write (see ValidID), so the
// two never meet. Thread records keep their suffix after the root.
func TenantScoped(id, tenant string) string {
	root, rest, found := strings.Cut(id, "/")
	if found {
		return root + "@" + tenant + "/" + rest
	}
	return root + "@" + tenant
}

// Unscoped is the id as its tenant named it: TenantScoped undone.
func Unscoped(id, tenant string) string {
	root, rest, found := strings.Cut(id, "/")
	root = strings.TrimSuffix(root, "@"+tenant)
	if found {
		return root + "/" + rest
	}
	return root
}
