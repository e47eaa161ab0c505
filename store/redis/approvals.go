package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/approvals"
)

// The approvals key layout. A request's and a hold's keys carry the hash tag
// of their trajectory's root, as records do; the indexes that span every
// root are kept per slot, under the tag of the root's slot (see slotTags),
// so that every write of a hold or a request stays in one slot; the lookup
// of a root by id is a key of its own.
//
//	gk:{root}:apr:<id>                     request JSON
//	gk:{root}:hold:<id>                    hold JSON
//	gk:{root}:holdkey:<trajectory>:<key>   id of a turn's latest hold (FindHold)
//	gk:{root}:recent:<trajectory>:<digest> latest request id of a call (Recent)
//	gk:{root}:aprtraj:<trajectory>         index of a trajectory's requests
//	gk:{root}:aprroot                      index of the root's requests
//	gk:{<id>}:loc                          the root tag of a request or hold
//	gk:{<slot>}:aprs:all                   index of the slot's requests
//	gk:{<slot>}:aprs:state:<state>         the same, by state
//	gk:{<slot>}:aprs:due                   the slot's pending requests scored by expiry (µs)
//	gk:{apr}:slots                         the slots holding those indexes
//	gk:{apr}:claim:<key>                   Claim's replay guard
//
// Indexes are sorted sets of score 0 whose members sort newest first (see
// member) followed by "@" and the request's root tag; entries whose request
// has expired are dropped when a read finds them.
func aprKey(tag, id string) string  { return "gk:{" + tag + "}:apr:" + id }
func holdKey(tag, id string) string { return "gk:{" + tag + "}:hold:" + id }
func holdTurnKey(tag, trajectory, key string) string {
	return "gk:{" + tag + "}:holdkey:" + trajectory + ":" + key
}
func recentKey(tag, trajectory, digest string) string {
	return "gk:{" + tag + "}:recent:" + trajectory + ":" + digest
}
func trajIndex(tag, trajectory string) string { return "gk:{" + tag + "}:aprtraj:" + trajectory }
func rootIndex(tag string) string             { return "gk:{" + tag + "}:aprroot" }
func locKey(id string) string                 { return "gk:{" + id + "}:loc" }
func allIndex(tag string) string              { return shardAll(shardOf(tag)) }
func stateIndex(tag string, st approvals.State) string {
	return shardState(shardOf(tag), st)
}
func dueIndex(tag string) string { return shardDue(shardOf(tag)) }
func claimKey(key string) string { return "gk:{apr}:claim:" + key }

// The lookup and expiry index of earlier versions, still read for what
// was held before an upgrade.
func legacyLocKey(id string) string { return "gk:{apr}:loc:" + id }

const legacyDue = "gk:{apr}:due"

func shardAll(shard string) string { return "gk:{" + shard + "}:aprs:all" }
func shardState(shard string, st approvals.State) string {
	return "gk:{" + shard + "}:aprs:state:" + string(st)
}
func shardDue(shard string) string { return "gk:{" + shard + "}:aprs:due" }

const (
	// approvalSlots is the directory of the slots holding approvals
	// indexes.
	approvalSlots = "gk:{apr}:slots"
	// listPage is how many index entries one List round trip reads.
	listPage = 256
	// maxListPages bounds one List walk.
	maxListPages = 400
)

// ApprovalsOptions configures an Approvals store.
type ApprovalsOptions struct {
	// Client is the Redis client, shared with the record store: a
	// *goredis.Client or a *goredis.ClusterClient. Its owner closes it.
	Client goredis.UniversalClient
	// Retention is how long a hold and its requests are kept after their
	// expiry. Zero or less means DefaultRetention.
	Retention time.Duration
	// MaxUpdateAttempts bounds the optimistic retries of Update and
	// UpdateHold. Zero or less means DefaultMaxUpdateAttempts.
	MaxUpdateAttempts int
	// Clock dates the keys' expiry; default time.Now.
	Clock func() time.Time
}

// Approvals keeps holds and approval requests in Redis, so a held turn
// survives a restart and any replica can decide it. Updates are optimistic
// transactions (WATCH/MULTI) retried with jitter.
type Approvals struct {
	rdb         goredis.UniversalClient
	dir         *shardDir
	retention   time.Duration
	maxAttempts int
	now         func() time.Time
}

var _ approvals.Store = (*Approvals)(nil)

// NewApprovals returns a store over o.Client.
func NewApprovals(o ApprovalsOptions) *Approvals {
	a := &Approvals{rdb: o.Client, dir: &shardDir{key: approvalSlots}, retention: o.Retention, maxAttempts: o.MaxUpdateAttempts, now: o.Clock}
	if a.retention <= 0 {
		a.retention = DefaultRetention
	}
	if a.maxAttempts <= 0 {
		a.maxAttempts = DefaultMaxUpdateAttempts
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a
}

// tagOf is the hash tag of a trajectory's keys: its root.
func tagOf(trajectory string) (string, error) {
	if trajectory == "" || strings.ContainsAny(trajectory, "{}") {
		return "", fmt.Errorf("redis approvals: trajectory id %q is empty or holds a brace", trajectory)
	}
	return rootOf(trajectory), nil
}

// ttl is how long a record expiring at expires is kept.
func (a *Approvals) ttl(expires time.Time) time.Duration {
	return max(expires.Add(a.retention).Sub(a.now()), time.Minute)
}

// aprFail wraps a Redis error as the record store's fail does: a reply that
// can never succeed, the caller gone or the client closed as they are, and
// everything else (no answer, or a reply that says "not now") as
// ErrUnavailable.
func aprFail(op string, err error) error {
	if permanentReply(err) || errors.Is(err, context.Canceled) || errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("redis approvals: %s: %w", op, err)
	}
	return fmt.Errorf("%w: approvals %s: %w", ErrUnavailable, op, err)
}

// dueMember names a request in the due index: id@tag.
func dueMember(tag, id string) string { return id + "@" + tag }

// dueParts splits a due index member, id@tag.
func dueParts(m string) (id, tag string, ok bool) {
	id, tag, ok = strings.Cut(m, "@")
	return id, tag, ok && id != ""
}

// indexMember is a request's entry in the other indexes: its due member
// behind the creation-time prefix that orders them.
func indexMember(tag, id string, created time.Time) string {
	return member(dueMember(tag, id), created)
}

// memberParts splits an index member into the request id and its root tag.
func memberParts(m string) (id, tag string, ok bool) { return dueParts(memberID(m)) }

// indexRequest adds the commands that index r (new or changed from was).
func (a *Approvals) indexRequest(ctx context.Context, p goredis.Pipeliner, tag string, r, was *approvals.Request) {
	m := indexMember(tag, r.ID, r.CreatedAt)
	if was == nil {
		p.ZAdd(ctx, allIndex(tag), goredis.Z{Member: m})
		p.ZAdd(ctx, trajIndex(tag, r.Trajectory), goredis.Z{Member: m})
		p.ZAdd(ctx, rootIndex(tag), goredis.Z{Member: m})
		p.Set(ctx, recentKey(tag, r.Trajectory, r.Digest), r.ID, a.ttl(r.ExpiresAt))
	}
	if was != nil && was.State != r.State {
		p.ZRem(ctx, stateIndex(tag, was.State), m)
	}
	if was == nil || was.State != r.State {
		p.ZAdd(ctx, stateIndex(tag, r.State), goredis.Z{Member: m})
	}
	if r.State == approvals.Pending {
		p.ZAdd(ctx, dueIndex(tag), goredis.Z{Score: float64(r.ExpiresAt.UnixMicro()), Member: dueMember(tag, r.ID)})
	} else {
		p.ZRem(ctx, dueIndex(tag), dueMember(tag, r.ID))
	}
}

// CreateHold implements approvals.Store in one transaction, watching the
// turn's key so that two replicas holding the same turn, or following the
// same hold, store one hold.
func (a *Approvals) CreateHold(ctx context.Context, h *approvals.Hold, reqs []*approvals.Request) (*approvals.Hold, error) {
	tag, err := tagOf(h.Trajectory)
	if err != nil {
		return nil, err
	}
	if h.ID == "" || strings.ContainsAny(h.ID, "{}") {
		return nil, fmt.Errorf("redis approvals: hold id %q is empty or holds a brace", h.ID)
	}
	hjs, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("redis approvals: encoding hold: %w", err)
	}
	rjs := make([][]byte, len(reqs))
	for i, r := range reqs {
		if r.ID == "" || r.Trajectory != h.Trajectory || r.Root != tag || strings.ContainsAny(r.ID, "{}@") {
			return nil, fmt.Errorf("redis approvals: request %q has no id, another trajectory than its hold, a root that is not its trajectory's, or a brace or @ in its id", r.ID)
		}
		if rjs[i], err = json.Marshal(r); err != nil {
			return nil, fmt.Errorf("redis approvals: encoding request: %w", err)
		}
	}
	// The directory and the lookups by id are written first, each in its
	// own slot: a crash after them leaves lookups that find nothing, never
	// a hold or a request that no lookup or List finds.
	known, err := a.dir.ensure(ctx, a.rdb, tag)
	if err != nil {
		return nil, aprFail("SADD "+approvalSlots, err)
	}
	if _, err := a.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		if known {
			a.dir.again(ctx, p, tag)
		}
		p.Set(ctx, locKey(h.ID), tag, a.ttl(h.ExpiresAt))
		for _, r := range reqs {
			p.Set(ctx, locKey(r.ID), tag, a.ttl(r.ExpiresAt))
		}
		return nil
	}); err != nil {
		return nil, aprFail("SET lookups", err)
	}
	turn := holdTurnKey(tag, h.Trajectory, h.Key)
	var existing *approvals.Hold
	err = a.optimistic(ctx, fmt.Sprintf("create hold %q", h.ID), turn, func(tx *goredis.Tx) error {
		id, err := tx.Get(ctx, turn).Result()
		if err == nil && id != h.Previous {
			if existing, err = a.getHold(ctx, tx, tag, id); err != nil {
				return &passed{err}
			}
			return &passed{approvals.ErrExists}
		}
		if err != nil && !errors.Is(err, goredis.Nil) {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			ttl := a.ttl(h.ExpiresAt)
			p.Set(ctx, holdKey(tag, h.ID), hjs, ttl)
			p.Set(ctx, turn, h.ID, ttl)
			for i, r := range reqs {
				p.Set(ctx, aprKey(tag, r.ID), rjs[i], a.ttl(r.ExpiresAt))
				a.indexRequest(ctx, p, tag, r, nil)
			}
			return nil
		})
		return err
	})
	if errors.Is(err, approvals.ErrExists) {
		return existing, err
	}
	if err != nil {
		return nil, err
	}
	return h.Clone(), nil
}

type getter interface {
	Get(ctx context.Context, key string) *goredis.StringCmd
}

func (a *Approvals) getHold(ctx context.Context, g getter, tag, id string) (*approvals.Hold, error) {
	b, err := g.Get(ctx, holdKey(tag, id)).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("%w: hold %q", approvals.ErrNotFound, id)
	}
	if err != nil {
		return nil, aprFail("GET hold", err)
	}
	var h approvals.Hold
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("redis approvals: decoding hold %q: %w", id, err)
	}
	return &h, nil
}

func (a *Approvals) getRequest(ctx context.Context, g getter, tag, id string) (*approvals.Request, error) {
	b, err := g.Get(ctx, aprKey(tag, id)).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("%w: request %q", approvals.ErrNotFound, id)
	}
	if err != nil {
		return nil, aprFail("GET request", err)
	}
	return decodeRequest(id, b)
}

func decodeRequest(id string, b []byte) (*approvals.Request, error) {
	var r approvals.Request
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("redis approvals: decoding request %q: %w", id, err)
	}
	return &r, nil
}

// locate returns the root tag of a request's or hold's id.
func (a *Approvals) locate(ctx context.Context, id, what string) (string, error) {
	if id == "" || strings.ContainsAny(id, "{}") {
		return "", fmt.Errorf("%w: %s %q", approvals.ErrNotFound, what, id)
	}
	tag, err := a.rdb.Get(ctx, locKey(id)).Result()
	if errors.Is(err, goredis.Nil) {
		// A request or hold made before an upgrade has its lookup under
		// the earlier key, until it expires.
		tag, err = a.rdb.Get(ctx, legacyLocKey(id)).Result()
	}
	if errors.Is(err, goredis.Nil) {
		return "", fmt.Errorf("%w: %s %q", approvals.ErrNotFound, what, id)
	}
	if err != nil {
		return "", aprFail("GET "+locKey(id), err)
	}
	return tag, nil
}

// GetHold implements approvals.Store.
func (a *Approvals) GetHold(ctx context.Context, id string) (*approvals.Hold, error) {
	tag, err := a.locate(ctx, id, "hold")
	if err != nil {
		return nil, err
	}
	return a.getHold(ctx, a.rdb, tag, id)
}

// FindHold implements approvals.Store.
func (a *Approvals) FindHold(ctx context.Context, trajectory, key string) (*approvals.Hold, error) {
	tag, err := tagOf(trajectory)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", approvals.ErrNotFound, err)
	}
	id, err := a.rdb.Get(ctx, holdTurnKey(tag, trajectory, key)).Result()
	if errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("%w: no hold of %q for that turn", approvals.ErrNotFound, trajectory)
	}
	if err != nil {
		return nil, aprFail("GET hold key", err)
	}
	return a.getHold(ctx, a.rdb, tag, id)
}

// UpdateHold implements approvals.Store as an optimistic transaction.
func (a *Approvals) UpdateHold(ctx context.Context, id string, fn func(*approvals.Hold) error) (*approvals.Hold, error) {
	tag, err := a.locate(ctx, id, "hold")
	if err != nil {
		return nil, err
	}
	key := holdKey(tag, id)
	var out *approvals.Hold
	err = a.optimistic(ctx, "update "+key, key, func(tx *goredis.Tx) error {
		h, err := a.getHold(ctx, tx, tag, id)
		if err != nil {
			return &passed{err}
		}
		c := h.Clone()
		if err := fn(c); err != nil {
			return &passed{err}
		}
		if c.ID != h.ID || c.Trajectory != h.Trajectory || c.Key != h.Key {
			return &passed{fmt.Errorf("redis approvals: update of hold %q changed its identity", id)}
		}
		js, err := json.Marshal(c)
		if err != nil {
			return &passed{fmt.Errorf("redis approvals: encoding hold: %w", err)}
		}
		if _, err := tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.Set(ctx, key, js, a.ttl(c.ExpiresAt))
			return nil
		}); err != nil {
			return err
		}
		out = c
		return nil
	})
	return out, err
}

// Get implements approvals.Store.
func (a *Approvals) Get(ctx context.Context, id string) (*approvals.Request, error) {
	tag, err := a.locate(ctx, id, "request")
	if err != nil {
		return nil, err
	}
	return a.getRequest(ctx, a.rdb, tag, id)
}

// Update implements approvals.Store as an optimistic transaction: fn runs
// on the current request, and again on a fresher one when another writer
// saved first, so concurrent votes are all counted.
func (a *Approvals) Update(ctx context.Context, id string, fn func(*approvals.Request) error) (*approvals.Request, error) {
	tag, err := a.locate(ctx, id, "request")
	if err != nil {
		return nil, err
	}
	key := aprKey(tag, id)
	var out *approvals.Request
	err = a.optimistic(ctx, "update "+key, key, func(tx *goredis.Tx) error {
		r, err := a.getRequest(ctx, tx, tag, id)
		if err != nil {
			return &passed{err}
		}
		c := r.Clone()
		if err := fn(c); err != nil {
			return &passed{err}
		}
		if c.ID != r.ID || c.Trajectory != r.Trajectory || c.Root != r.Root || !c.CreatedAt.Equal(r.CreatedAt) {
			return &passed{fmt.Errorf("redis approvals: update of request %q changed its identity", id)}
		}
		js, err := json.Marshal(c)
		if err != nil {
			return &passed{fmt.Errorf("redis approvals: encoding request: %w", err)}
		}
		if _, err := tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.Set(ctx, key, js, a.ttl(c.ExpiresAt))
			a.indexRequest(ctx, p, tag, c, r)
			return nil
		}); err != nil {
			return err
		}
		out = c
		return nil
	})
	return out, err
}

// passed carries an error of fn, or of reading the value, through Watch
// untouched: only Redis's own failures are wrapped as such.
type passed struct{ err error }

func (p *passed) Error() string { return p.err.Error() }

// optimistic runs txf watching key until it saves without a conflict,
// backing off with jitter between attempts; op names the call in errors.
func (a *Approvals) optimistic(ctx context.Context, op, key string, txf func(*goredis.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := a.rdb.Watch(ctx, txf, key)
		var p *passed
		switch {
		case err == nil:
			return nil
		case errors.As(err, &p):
			return p.err
		case !errors.Is(err, goredis.TxFailedErr):
			return aprFail(op, err)
		case attempt >= a.maxAttempts:
			return fmt.Errorf("%w: %s, %d attempts", ErrConflict, op, attempt)
		}
		if err := waitBackoff(ctx, attempt, rand.N[time.Duration]); err != nil {
			return err
		}
	}
}
