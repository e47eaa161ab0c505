package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

	"gatekeeper/trajectory"
)

// State is where an approval request stands.
type State string

// States of a request. Only Pending is undecided.
const (
	Pending   State = "pending"
	Approved  State = "approved"
	Denied    State = "denied"
	Expired   State = "expired"
	Stale     State = "stale"     // a re-check at release failed
	Withdrawn State = "withdrawn" // the turn went away before a decision
)

// Valid reports whether s is one of the states.
func (s State) Valid() bool {
	switch s {
	case Pending, Approved, Denied, Expired, Stale, Withdrawn:
		return true
	}
	return false
}

// Refusal reasons in the REFUSED tool result.
const (
	ReasonDenied  = "APPROVAL_DENIED"
	ReasonExpired = "APPROVAL_EXPIRED"
	ReasonStale   = "STALE"
)

// Where a vote came from.
const (
	ViaAdmin = "admin"
	ViaSlack = "slack"
)

// Sentinel errors.
var (
	ErrNotFound     = errors.New("approvals: not found")
	ErrExists       = errors.New("approvals: already exists")
	ErrNotApprover  = errors.New("approvals: not an approver of this gate")
	ErrAlreadyVoted = errors.New("approvals: already voted")
	ErrDecided      = errors.New("approvals: already decided")
	ErrExpired      = errors.New("approvals: expired")
	ErrInvalidArgs  = errors.New("approvals: tool arguments are not valid JSON")
	// ErrRepeatedKey: an object of the arguments names a key twice, or
	// two keys equal under case folding; it comes wrapped with
	// ErrInvalidArgs.
	ErrRepeatedKey    = errors.New("approvals: tool arguments repeat a key")
	ErrTooManyPending = errors.New("approvals: too many pending requests for this trajectory")
)

// Vote is one person's answer to a request.
type Vote struct {
	// Approver is the person (approvals.people), or the admin token's
	// name or the mapped Slack user's name when no person lists them: one
	// identity across channels, so a quorum counts people.
	Approver string   `json:"approver"`
	Roles    []string `json:"roles"` // the approver's roles (from config)
	Approve  bool     `json:"approve"`
	Reason   string   `json:"reason,omitempty"`
	Via      string   `json:"via"` // ViaAdmin | ViaSlack
	// Credential is what the vote arrived with: "admin token <name>" or
	// "slack user <id>".
	Credential string    `json:"credential,omitempty"`
	At         time.Time `json:"at"`
	// Tenants, when set, are the only tenants whose requests the voter
	// may vote on: another tenant's request is absent to them
	// (ErrNotFound). Not stored.
	Tenants []string `json:"-"`
}

// Observed are the preconditions observed when the call was held; release
// re-checks them.
type Observed struct {
	State      string   `json:"state"`
	Stage      string   `json:"stage"`
	BudgetUsed float64  `json:"budget_used"`
	Grant      []string `json:"grant,omitempty"` // tools allowed at that stage; empty = all
}

// Request is one approval request: one gated call of a held turn.
type Request struct {
	ID            string            `json:"id"`         // "apr_..."
	Hold          string            `json:"hold"`       // the held turn it belongs to
	Trajectory    string            `json:"trajectory"` // the thread record id
	Root          string            `json:"root"`       // the root trajectory id
	Thread        string            `json:"thread"`
	Tenant        string            `json:"tenant"`
	CallID        string            `json:"call_id"` // tool call id in the reply
	Call          Call              `json:"call"`
	Digest        string            `json:"digest"`
	Gate          string            `json:"gate"`
	Why           string            `json:"why"`                       // the gate's condition, or the evaluation error
	Preview       string            `json:"preview"`                   // ≤ 500 chars, human-readable: head and tail of a long call, the elision stated
	Matched       []Match           `json:"matched,omitempty"`         // the parts of the call the gate's condition matched
	Invisible     int               `json:"invisible_chars,omitempty"` // invisible characters in the call, escaped in every view
	Observed      Observed          `json:"observed"`
	Roles         []string          `json:"roles"` // copied from the gate at creation
	Quorum        int               `json:"quorum"`
	DistinctRoles bool              `json:"distinct_roles"`
	OnRefusal     string            `json:"on_refusal"` // "continue" | "end_turn"
	CreatedAt     time.Time         `json:"created_at"`
	ExpiresAt     time.Time         `json:"expires_at"`
	Votes         []Vote            `json:"votes"`
	State         State             `json:"state"`
	DecidedAt     *time.Time        `json:"decided_at"`
	Reason        string            `json:"reason,omitempty"`   // decision reason (deny reason, "expired", ...)
	Channels      map[string]string `json:"channels,omitempty"` // e.g. "slack.channel", "slack.ts"
}

// HoldState is where a held turn stands.
type HoldState string

// States of a hold.
const (
	Holding  HoldState = "holding"
	Released HoldState = "released"
	Refused  HoldState = "refused"
)

// Hold is one held turn: the reply that carried gated calls, kept until
// every one of its requests is decided.
type Hold struct {
	ID         string `json:"id"`         // "hold_..."
	Trajectory string `json:"trajectory"` // thread record id
	Root       string `json:"root"`
	Tenant     string `json:"tenant"`
	Key        string `json:"key"` // the turn key: digest of the request content
	// Generation is the hold's place among the holds of its turn on its
	// record, from 1; Previous is the hold it follows there: the one whose
	// refused calls its continuation answers, or the delivered one of the
	// same content before it. 0 and "" in holds stored before these were
	// recorded, whose key carried the generation ("/1" … "/8" after the
	// turn key).
	Generation    int       `json:"generation,omitempty"`
	Previous      string    `json:"previous,omitempty"`
	API           string    `json:"api"`      // streaming.API value
	Streamed      bool      `json:"streamed"` // Reply is an SSE stream (else a JSON body)
	Provider      string    `json:"provider"`
	Model         string    `json:"model"`
	Request       []byte    `json:"request"`  // the request body as sent upstream
	Reply         []byte    `json:"reply"`    // the provider's raw reply, as received
	Requests      []string  `json:"requests"` // approval request ids
	Calls         []string  `json:"calls"`    // ids of all client tool calls in the reply
	State         HoldState `json:"state"`
	Continuations int       `json:"continuations"`
	Delivered     bool      `json:"delivered"` // the decided reply went to a client once
	CreatedAt     time.Time `json:"created_at"`
	ExpiresAt     time.Time `json:"expires_at"` // the latest request expiry
}

// MaxListLimit bounds Filter.Limit.
const MaxListLimit = 1000

// Filter selects requests for List. Zero fields select everything; Limit 0
// means MaxListLimit.
type Filter struct {
	State      State
	Trajectory string
	Root       string
	// Tenants, when set, keeps the requests of these tenants only (an
	// admin token's scope).
	Tenants []string
	Limit   int
}

// Match reports whether r passes every condition of f (Limit aside).
func (f Filter) Match(r *Request) bool {
	return (f.State == "" || r.State == f.State) && (f.Trajectory == "" || r.Trajectory == f.Trajectory) &&
		(f.Root == "" || r.Root == f.Root) && (f.Tenants == nil || slices.Contains(f.Tenants, r.Tenant))
}

// Store keeps holds and requests. Implementations: store/memory (Approvals)
// and store/redis (Approvals), checked by one contract suite in
// store/storetest.
type Store interface {
	// CreateHold stores h and its requests in one step, as the latest
	// hold of its turn (h.Trajectory, h.Key). When the turn has a latest
	// hold already and it is not h.Previous, it returns that hold and
	// ErrExists, storing nothing: of two replicas holding the same turn,
	// or following the same hold, one stores its hold.
	CreateHold(ctx context.Context, h *Hold, reqs []*Request) (*Hold, error)
	GetHold(ctx context.Context, id string) (*Hold, error)
	// FindHold returns the latest hold of trajectory for the turn key,
	// ErrNotFound when none.
	FindHold(ctx context.Context, trajectory, key string) (*Hold, error)
	UpdateHold(ctx context.Context, id string, fn func(*Hold) error) (*Hold, error)
	Get(ctx context.Context, id string) (*Request, error)
	// List returns the requests f selects, newest first.
	List(ctx context.Context, f Filter) ([]*Request, error)
	// Update applies fn atomically (optimistic retry across replicas); fn's
	// error aborts.
	Update(ctx context.Context, id string, fn func(*Request) error) (*Request, error)
	// Due lists pending requests with ExpiresAt ≤ t, oldest first, at most
	// limit.
	Due(ctx context.Context, t time.Time, limit int) ([]*Request, error)
	// Recent returns the latest request of trajectory (thread record id)
	// with digest, or ErrNotFound.
	Recent(ctx context.Context, trajectory, digest string) (*Request, error)
	// Claim records key once for ttl; false when it was already claimed
	// (replay guard).
	Claim(ctx context.Context, key string, ttl time.Duration) (bool, error)
}

// Notifier announces requests and decisions to a channel (Slack, webhook).
type Notifier interface {
	Announce(ctx context.Context, r *Request) error
	Decided(ctx context.Context, r *Request) error
}

// SignalKind is the trajectory.Signal kind published (ID = the request's
// Trajectory) when a request is decided or expires, so the replica holding
// the turn wakes at once.
const SignalKind trajectory.ControlKind = "approval"

// Clone returns a deep copy of r, so a store's caller cannot change what
// the store holds.
func (r *Request) Clone() *Request {
	if r == nil {
		return nil
	}
	c := *r
	c.Call.Input = append(json.RawMessage(nil), r.Call.Input...)
	c.Observed.Grant = cloneStrings(r.Observed.Grant)
	c.Roles = cloneStrings(r.Roles)
	if r.Matched != nil {
		c.Matched = append([]Match(nil), r.Matched...)
	}
	if r.Votes != nil {
		c.Votes = make([]Vote, len(r.Votes))
		for i, v := range r.Votes {
			v.Roles = cloneStrings(v.Roles)
			c.Votes[i] = v
		}
	}
	if r.DecidedAt != nil {
		t := *r.DecidedAt
		c.DecidedAt = &t
	}
	c.Channels = maps.Clone(r.Channels)
	return &c
}

// Clone returns a deep copy of h.
func (h *Hold) Clone() *Hold {
	if h == nil {
		return nil
	}
	c := *h
	c.Request = append([]byte(nil), h.Request...)
	c.Reply = append([]byte(nil), h.Reply...)
	c.Requests = cloneStrings(h.Requests)
	c.Calls = cloneStrings(h.Calls)
	return &c
}

func cloneStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s...)
}
