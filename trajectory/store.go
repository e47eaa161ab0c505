package trajectory

import (
	"context"
	"errors"
	"slices"
	"time"
)

// Store persists records and their event logs. It is the domain's port:
// store/memory implements it for one process, a Redis store for replicas.
// Every record a Store returns is a copy; changing it never changes what is
// stored. store/storetest holds the contract suite every Store must pass.
type Store interface {
	// Create saves a new record with its first events. It returns
	// ErrExists if the ID is taken and ErrNotFound if rec names a parent
	// that does not exist; the parent's Children gains rec.ID in the same
	// atomic step.
	Create(ctx context.Context, rec *Record, evs ...Event) error
	// CreateChild is Create for a record with a parent, bounded: the
	// parent gains rec.ID only while it has fewer than max children (0:
	// no bound), checked and added in the same atomic step, so that
	// children created at once never pass max. A parent that is full
	// saves nothing and returns *ChildrenFullError.
	CreateChild(ctx context.Context, rec *Record, max int, evs ...Event) error
	// Get returns a copy of the record, or ErrNotFound.
	Get(ctx context.Context, id string) (*Record, error)
	// Update runs fn on a copy of the record under the store's lock or
	// transaction and saves the result with the events fn returns,
	// atomically. An error from fn aborts: nothing is saved and the error
	// is returned as is. fn must not change ID, ParentID or Children
	// (ErrInvalidRecord) and must have no effect outside the record: a
	// store with optimistic transactions may run it more than once.
	Update(ctx context.Context, id string, fn func(*Record) ([]Event, error)) (*Record, error)
	// UpdateChain is Update over a record and its ancestors at once: fn
	// gets copies of the record id names and of each of its ancestors,
	// nearest first (chain[0] is id's record, the last is the root), and
	// every record of the chain is saved with the events fn returns in one
	// atomic step, or nothing is. Each event goes to the log of the record
	// its Trajectory names, which must be one of the chain
	// (ErrInvalidRecord otherwise); an empty Trajectory means chain[0].
	// The same guards as Update apply to every record, and a chain deeper
	// than MaxDepth is ErrInvalidRecord. It returns the saved copies,
	// nearest first.
	UpdateChain(ctx context.Context, id string, fn func(chain []*Record) ([]Event, error)) ([]*Record, error)
	// List returns the records f matches, newest (CreatedAt) first, at
	// most f.Limit of them.
	List(ctx context.Context, f Filter) ([]*Record, error)
	// AppendEvents adds events to the log of an existing record.
	AppendEvents(ctx context.Context, id string, evs ...Event) error
	// Events returns up to limit events with Seq > afterSeq, oldest first.
	// A limit of zero or less means DefaultListLimit; more than
	// MaxListLimit is cut to it.
	Events(ctx context.Context, id string, afterSeq int64, limit int) ([]Event, error)
	// Ping reports whether the store can serve (ErrClosed once closed).
	Ping(ctx context.Context) error
	Close() error
}

// Finished picks, of ids, the records st holds finished or no longer
// holds (expired): what a tenant's ledger of live runs may forget.
func Finished(ctx context.Context, st interface {
	Get(ctx context.Context, id string) (*Record, error)
}, ids []string) ([]string, error) {
	var ended []string
	for _, id := range ids {
		rec, err := st.Get(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
			ended = append(ended, id)
		case err != nil:
			return nil, err
		case rec.State.Terminal():
			ended = append(ended, id)
		}
	}
	return ended, nil
}

// MaxDepth bounds a record's chain, itself and its ancestors: a tree of
// runs and subagents nested deeper than this is refused at creation.
const MaxDepth = 16

// Bounds on one List or Events page.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// Filter selects records for List. Zero fields match everything.
type Filter struct {
	State  State
	Tenant string
	// Tenants, when set, keeps the records of these tenants only (an
	// admin token's scope); Tenant narrows within them.
	Tenants       []string
	MinBudgetUsed float64
	// ParentID, when set, keeps the children of that record; pointing at
	// "" keeps root records only.
	ParentID *string
	// Person, when set, keeps the runs a person started: those whose
	// Person has that subject or that label (Person.Label: the email, else
	// the name).
	Person string
	Limit  int
}

// Match reports whether r passes every condition of f (Limit aside).
func (f Filter) Match(r *Record) bool {
	switch {
	case f.State != "" && r.State != f.State:
		return false
	case f.Tenant != "" && r.Tenant != f.Tenant:
		return false
	case f.Tenants != nil && !slices.Contains(f.Tenants, r.Tenant):
		return false
	case r.BudgetUsed < f.MinBudgetUsed:
		return false
	case f.ParentID != nil && r.ParentID != *f.ParentID:
		return false
	case f.Person != "" && !r.Person.Is(f.Person):
		return false
	}
	return true
}

// PageLimit bounds a requested page size: zero or less gives
// DefaultListLimit, anything past MaxListLimit is cut to it.
func PageLimit(n int) int {
	switch {
	case n <= 0:
		return DefaultListLimit
	case n > MaxListLimit:
		return MaxListLimit
	}
	return n
}

// Signal tells every replica that an operator's control request reached a
// record, so that the replica serving that record's call in flight, if
// any, acts on it at once (cancel, kill) rather than at the call's end.
type Signal struct {
	ID   string      `json:"id"`
	Kind ControlKind `json:"kind"`
}

// Signals carries Signals between replicas: store/memory within one
// process, Redis pub/sub across processes. Delivery is at most once: a
// replica that misses a signal still applies the pending control from the
// record at the call's end.
type Signals interface {
	// Publish sends s to every current subscriber, this process's included.
	Publish(ctx context.Context, s Signal) error
	// Subscribe delivers signals published from now on until ctx ends,
	// when the channel is closed. A subscriber that falls behind loses
	// signals rather than blocking publishers.
	Subscribe(ctx context.Context) (<-chan Signal, error)
}

// Links keeps short-lived links from a key to a trajectory id: how a later
// turn of a conversation that names no session finds the run its first
// turn began (the key derives from the conversation and the model's first
// reply, so that it is known only to turns that replay that reply).
type Links interface {
	// Link saves key → id for ttl, unless key links somewhere already:
	// a first link is never moved.
	Link(ctx context.Context, key, id string, ttl time.Duration) error
	// Linked returns the id key links to, or ErrNotFound.
	Linked(ctx context.Context, key string) (string, error)
}
