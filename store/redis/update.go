package redis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/ride"
	"gatekeeper/trajectory"
)

// reach is how much of a record's chain one update covers.
type reach int

const (
	// oneRecord is Update: the record alone, and every event goes to its
	// log whatever the event's Trajectory says.
	oneRecord reach = iota
	// wholeChain is UpdateChain: the record and its ancestors, each event
	// to the log of the record its Trajectory names.
	wholeChain
)

type chainFunc = func([]*trajectory.Record) ([]trajectory.Event, error)

// Update implements trajectory.Store as UpdateChain does, on the record
// alone: one round trip when this process holds the record's current
// version, two when another writer saved it since.
func (s *Store) Update(ctx context.Context, id string, fn func(*trajectory.Record) ([]trajectory.Event, error)) (*trajectory.Record, error) {
	out, err := s.update(ctx, id, oneRecord, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		return fn(chain[0])
	})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// UpdateChain implements trajectory.Store as an optimistic transaction.
// It starts from the records as this process last saw them (the cache),
// reading from Redis only those it lacks, runs fn, and sends one script
// that saves everything if no record moved since. When one did, the
// script saves nothing and answers the current records, and UpdateChain
// runs fn again on them: one round trip when no other writer saved the
// chain since this process last saw it, two when one did. Repeated
// conflicts back off with jitter, MaxUpdateAttempts times at most
// (ErrConflict).
//
// A rider ctx carries (internal/ride) goes in the pipeline of the first
// attempt that sends the script, and in no later one: an fn that refuses
// before that sends nothing, the rider with it. The caller reads its
// results after UpdateChain returns, whatever the update's own outcome.
func (s *Store) UpdateChain(ctx context.Context, id string, fn func([]*trajectory.Record) ([]trajectory.Event, error)) ([]*trajectory.Record, error) {
	return s.update(ctx, id, wholeChain, fn)
}

func (s *Store) update(ctx context.Context, id string, r reach, fn chainFunc) ([]*trajectory.Record, error) {
	if id == "" || checkID(id) != nil {
		return nil, notFound(id)
	}
	// What the last conflict answered, in case the cache has dropped it
	// since.
	fresh := make(map[string]*entry)
	var unlock func()
	defer func() {
		if unlock != nil {
			unlock()
		}
	}()
	for attempt := 1; ; attempt++ {
		if err := s.usable(ctx); err != nil {
			return nil, s.fail(ctx, "update "+id, err)
		}
		if unlock == nil {
			var err error
			if unlock, err = s.locks.lock(ctx, rootOf(id)); err != nil {
				// Out of time waiting behind another update of the tree,
				// most often one waiting on a Redis that does not answer:
				// unavailable, so that a settle is retried, not dropped.
				return nil, s.fail(ctx, "update "+id, err)
			}
		}
		out, retry, err := s.tryUpdate(ctx, id, r, fn, fresh)
		if !retry {
			return out, err
		}
		if attempt >= s.maxAttempts {
			return nil, fmt.Errorf("%w: %q, %d attempts", ErrConflict, id, attempt)
		}
		// The first conflict most often means this process's copy was
		// stale, and the reply has just made it current: retry at once,
		// still holding the tree. Later ones mean writers racing, who must
		// not retry in lockstep; the tree is let go while this one waits.
		if attempt > 1 {
			unlock()
			unlock = nil
			if err := s.backoff(ctx, attempt-1); err != nil {
				return nil, s.fail(ctx, "update "+id, err)
			}
		}
	}
}

// tryUpdate is one attempt of update, run holding the tree's lock; retry
// reports a record that moved, and fresh then holds what the script
// found.
func (s *Store) tryUpdate(ctx context.Context, id string, r reach, fn chainFunc, fresh map[string]*entry) (out []*trajectory.Record, retry bool, err error) {
	a, err := s.attempt(ctx, id, r, fn, fresh)
	if err != nil {
		return nil, false, err
	}
	reply, err := s.eval(ctx, chainScript, a.w.keys, a.args(ctx, s), a.before)
	return s.answer(ctx, a, reply, err, fresh)
}

// try is one attempt of an update, prepared: fn has run on the chain as
// this process last saw it, and w is what saves its work.
type try struct {
	id     string
	r      reach
	chain  []*entry
	recs   []*trajectory.Record
	w      write
	before func(goredis.Pipeliner) // commands sent ahead of the script, or nil
}

// args are the chain script's arguments, the latest time Redis may run
// it last.
func (a *try) args(ctx context.Context, s *Store) []any {
	return append(a.w.args, s.clock.notAfter(ctx))
}

// attempt prepares one attempt of an update: it reads the chain (from
// the cache when it can), runs fn on copies and builds the script call.
func (s *Store) attempt(ctx context.Context, id string, r reach, fn chainFunc, fresh map[string]*entry) (*try, error) {
	chain, err := s.snapshot(ctx, id, r, fresh)
	if err != nil {
		return nil, err
	}
	recs := make([]*trajectory.Record, len(chain))
	for i, e := range chain {
		recs[i] = e.rec.Clone()
	}
	evs, err := fn(recs)
	if err != nil {
		return nil, err
	}
	w, err := s.prepare(id, r, chain, recs, evs)
	if err != nil {
		return nil, err
	}
	a := &try{id: id, r: r, chain: chain, recs: recs, w: w}
	rider := ride.Take(ctx) // sent with the first attempt that reaches Redis, once
	if len(w.finished) > 0 || len(w.calling) > 0 || rider != nil {
		// Written ahead of the save so that no crash can leave a finished
		// record the prune never visits, or a call the sweeper never
		// sees; if the save then loses its race, the prune finds a live
		// record and drops the entry. The indexes are in the chain's
		// slot, hence on the same node and connection as the script,
		// which they precede.
		shard := shardOf(rootOf(id))
		a.before = func(p goredis.Pipeliner) {
			if len(w.finished) > 0 {
				p.ZAdd(ctx, idxExpires(shard), w.finished...)
			}
			if len(w.calling) > 0 {
				p.ZAdd(ctx, idxCalling(shard), w.calling...)
			}
			if rider != nil {
				// Its own slot: on a cluster it goes to its node in
				// parallel with the script.
				rider.Queue(ctx, s.rdb, p)
			}
		}
	}
	return a, nil
}

// answer reads the chain script's reply to attempt a (or the error of
// sending it): the saved chain, or retry when a record moved (fresh then
// holds what the script found).
func (s *Store) answer(ctx context.Context, a *try, reply any, err error, fresh map[string]*entry) (out []*trajectory.Record, retry bool, _ error) {
	id, chain, recs, w := a.id, a.chain, a.recs, a.w
	if err != nil {
		// The script may have run with its answer lost: what this process
		// holds of the chain may be behind Redis, and an fn that refuses
		// on it (the release of an abandoned admission finding no call)
		// would send nothing to find out. The next update reads the chain.
		for _, e := range chain {
			s.cache.drop(e.rec.ID)
		}
		return nil, false, s.fail(ctx, "update "+id, err)
	}
	code, rest, err := replyCode(reply)
	if err != nil {
		return nil, false, fmt.Errorf("%w: update %s: %w", errReply, id, err)
	}
	switch code {
	case replyOK:
		out, err := s.saved(id, chain, recs, w.json, rest)
		return out, false, err
	case replyVersionMoved:
		clear(fresh)
		for i, e := range chain {
			got, err := entryFromReply(e.rec.ID, rest, i)
			if err != nil {
				return nil, false, fmt.Errorf("update %s: %w", id, err)
			}
			s.cache.put(got)
			fresh[got.rec.ID] = got
		}
		return nil, true, nil
	case replyNotFound:
		i, err := replyIndex(rest, len(chain))
		if err != nil {
			return nil, false, fmt.Errorf("%w: update %s: %w", errReply, id, err)
		}
		clear(fresh)
		for _, e := range chain {
			s.cache.drop(e.rec.ID)
		}
		if i == 0 {
			return nil, false, notFound(id)
		}
		// The ancestor this process knew is gone. A read tells whether the
		// chain lost it (ErrNotFound) or was made anew under other
		// parents, and leaves the new chain in the cache for a retry.
		if _, err := s.snapshot(ctx, id, a.r, fresh); err != nil {
			return nil, false, err
		}
		return nil, true, nil
	case replyFieldsMissing:
		return nil, false, fmt.Errorf("%w: update %s: a record of its chain has no version", errReply, id)
	case replyTooLate:
		if len(rest) != 1 {
			return nil, false, fmt.Errorf("%w: update %s: %d values after the code, want 1", errReply, id, len(rest))
		}
		redisMs, ok := rest[0].(int64)
		if !ok {
			return nil, false, fmt.Errorf("%w: update %s: Redis's time %T", errReply, id, rest[0])
		}
		if dl, ok := ctx.Deadline(); !ok || !time.Now().Before(dl) {
			return nil, false, s.fail(ctx, "update "+id, context.DeadlineExceeded)
		}
		// Refused though this process still waits: Redis's clock is
		// ahead of this one's. The update is sent again with the
		// difference counted.
		s.clock.saw(redisMs)
		return nil, true, nil
	}
	return nil, false, fmt.Errorf("%w: update %s: script answered %d", errReply, id, code)
}

// snapshot is the chain of id, nearest first, as this process last saw
// it: from the cache (which holds the newest of what it was given), then
// fresh, then Redis for what both lack. It
// follows each record's ParentID. A parent's id is a prefix of its
// child's, so one read of a missing record with every ancestor its id
// names finds the rest of the chain; one more is needed only when the
// cache held a record but has lost an ancestor of it.
func (s *Store) snapshot(ctx context.Context, id string, r reach, fresh map[string]*entry) ([]*entry, error) {
	var chain []*entry
	var read map[string]*entry
	for cur := id; ; {
		if len(chain) == trajectory.MaxDepth {
			return nil, fmt.Errorf("%w: the chain of %q is deeper than %d", trajectory.ErrInvalidRecord, id, trajectory.MaxDepth)
		}
		e := s.cache.get(cur)
		if e == nil {
			e = fresh[cur]
		}
		if e == nil {
			e = read[cur]
		}
		if e == nil {
			if checkID(cur) != nil {
				return nil, notFound(cur)
			}
			ids := []string{cur}
			if r == wholeChain {
				ids = lineage(cur)
			}
			got, err := s.read(ctx, ids)
			if err != nil {
				return nil, err
			}
			if read == nil {
				read = got
			} else {
				maps.Copy(read, got)
			}
			if e = got[cur]; e == nil {
				return nil, notFound(cur)
			}
		}
		chain = append(chain, e)
		if r == oneRecord || e.rec.ParentID == "" {
			return chain, nil
		}
		cur = e.rec.ParentID
	}
}

// lineage is id and the ancestors its id names, nearest first: the
// prefixes of id that end before a "/", MaxDepth ids at most.
func lineage(id string) []string {
	ids := []string{id}
	for i := len(id) - 1; i > 0 && len(ids) < trajectory.MaxDepth; i-- {
		if id[i] == '/' {
			ids = append(ids, id[:i])
		}
	}
	return ids
}

// write is what one attempt sends: the chain script's keys and arguments,
// the expiry index entries of the records it finishes, and the JSON saved
// per record ("" if left as it was).
type write struct {
	keys     []string
	args     []any
	finished []goredis.Z
	calling  []goredis.Z // records this save moves into CALLING_MODEL (see idxCalling)
	json     []string
}

// prepare checks what fn did to the chain and builds the script call that
// saves it.
func (s *Store) prepare(id string, r reach, chain []*entry, recs []*trajectory.Record, evs []trajectory.Event) (write, error) {
	n := len(chain)
	byRecord := make([][]trajectory.Event, n)
	for _, ev := range evs {
		i := 0
		if r == wholeChain && ev.Trajectory != "" {
			i = slices.IndexFunc(chain, func(e *entry) bool { return e.rec.ID == ev.Trajectory })
			if i < 0 {
				return write{}, fmt.Errorf("%w: event for %q is outside the chain of %q", trajectory.ErrInvalidRecord, ev.Trajectory, id)
			}
		}
		byRecord[i] = append(byRecord[i], ev)
	}
	w := write{
		keys: make([]string, 0, 2*n),
		args: make([]any, 0, 3+4*n+2*len(evs)),
		json: make([]string, n),
	}
	w.args = append(w.args, n, s.maxEvents, s.retention.Milliseconds())
	for i, e := range chain {
		was, c := e.rec, recs[i]
		if err := unchangedIdentity(was, c); err != nil {
			return write{}, err
		}
		if err := c.Validate(); err != nil {
			return write{}, err
		}
		js, err := encodeRecord(c)
		if err != nil {
			return write{}, err
		}
		if js == e.json {
			js = ""
		}
		w.json[i] = js
		var finishing any = 0
		switch {
		case c.State.Terminal() && !was.State.Terminal():
			finishing = 1
			w.finished = append(w.finished, goredis.Z{Score: float64(s.now().Add(s.retention).UnixMilli()), Member: member(c.ID, c.CreatedAt)})
		case c.State.Terminal() || s.idle <= 0:
		case idleChain(recs):
			finishing = "i" + strconv.FormatInt(s.idle.Milliseconds(), 10)
			w.finished = append(w.finished, goredis.Z{Score: float64(s.now().Add(s.idle).UnixMilli()), Member: member(c.ID, c.CreatedAt)})
		default:
			finishing = "x"
		}
		if c.State == trajectory.CallingModel && was.State != trajectory.CallingModel {
			w.calling = append(w.calling, goredis.Z{Score: s.callingScore(), Member: member(c.ID, c.CreatedAt)})
		}
		w.keys = append(w.keys, recKey(c.ID), evKey(c.ID))
		w.args = append(w.args, e.tag(), js, finishing, len(byRecord[i]))
	}
	for _, revs := range byRecord {
		var err error
		if w.args, err = eventArgs(w.args, revs); err != nil {
			return write{}, err
		}
	}
	return w, nil
}

// unchangedIdentity refuses an fn that changed what places a record in
// its tree, or its creation time, by which the List index orders it.
func unchangedIdentity(was, c *trajectory.Record) error {
	switch {
	case c == nil:
		return fmt.Errorf("%w: update of %q replaced the record with nil", trajectory.ErrInvalidRecord, was.ID)
	case c.ID != was.ID:
		return fmt.Errorf("%w: update of %q changed its id to %q", trajectory.ErrInvalidRecord, was.ID, c.ID)
	case c.ParentID != was.ParentID:
		return fmt.Errorf("%w: update of %q changed its parent", trajectory.ErrInvalidRecord, was.ID)
	case !slices.Equal(c.Children, was.Children):
		return fmt.Errorf("%w: update of %q changed its children", trajectory.ErrInvalidRecord, was.ID)
	case !c.CreatedAt.Equal(was.CreatedAt):
		return fmt.Errorf("%w: update of %q changed its creation time", trajectory.ErrInvalidRecord, was.ID)
	}
	return nil
}

// saved records a successful save in the cache and hands back copies fn
// cannot reach: it may have kept the ones it was given.
func (s *Store) saved(id string, chain []*entry, recs []*trajectory.Record, json []string, vers []any) ([]*trajectory.Record, error) {
	if len(vers) != len(chain) {
		return nil, fmt.Errorf("%w: update %s: %d versions for %d records", errReply, id, len(vers), len(chain))
	}
	out := make([]*trajectory.Record, len(chain))
	for i, e := range chain {
		ver, ok := vers[i].(int64)
		if !ok {
			return nil, fmt.Errorf("%w: update %s: version is %T", errReply, id, vers[i])
		}
		js := json[i]
		if js == "" {
			js = e.json
		}
		s.cache.put(&entry{gen: e.gen, ver: ver, json: js, rec: recs[i].Clone()})
		out[i] = recs[i].Clone()
	}
	return out, nil
}

// read fetches records with their gen and version in one round trip and
// remembers them. A missing record is absent from the map.
func (s *Store) read(ctx context.Context, ids []string) (map[string]*entry, error) {
	cmds, err := s.hmget(ctx, ids)
	if err != nil && ctx.Err() == nil && !permanentReply(err) {
		// A read changes nothing, so it is the one command sent again
		// after a broken connection (the client itself retries none).
		cmds, err = s.hmget(ctx, ids)
	}
	if err != nil {
		return nil, s.fail(ctx, "HMGET "+ids[0], err)
	}
	out := make(map[string]*entry, len(ids))
	for i, c := range cmds {
		vals := c.Val()
		if len(vals) != len(entryFields) {
			return nil, fmt.Errorf("%w: HMGET %s: %d values for %d fields", errReply, ids[i], len(vals), len(entryFields))
		}
		if vals[2] == nil {
			continue
		}
		ver, ok := vals[0].(string)
		if !ok {
			return nil, fmt.Errorf("%w: record %q: ver field is %T", errReply, ids[i], vals[0])
		}
		e, err := newEntry(ids[i], vals[1], ver, vals[2], vals[3])
		if err != nil {
			return nil, err
		}
		s.cache.put(e)
		out[ids[i]] = e
	}
	return out, nil
}

// hmget reads the entry fields of each record, in one round trip.
func (s *Store) hmget(ctx context.Context, ids []string) ([]*goredis.SliceCmd, error) {
	cmds := make([]*goredis.SliceCmd, len(ids))
	if len(ids) == 1 {
		cmds[0] = s.rdb.HMGet(ctx, recKey(ids[0]), entryFields...)
		return cmds, cmds[0].Err()
	}
	pipe := s.rdb.Pipeline()
	for i, id := range ids {
		cmds[i] = pipe.HMGet(ctx, recKey(id), entryFields...)
	}
	_, err := pipe.Exec(ctx)
	return cmds, err
}

// entryFields are the hash fields read makes an entry of.
var entryFields = []string{"ver", "gen", "json", "kids"}

// newEntry makes an entry of a record hash's fields as Redis answered
// them: gen and kids nil or a string, ver a string or an integer.
func newEntry(id string, gen, ver, js, kids any) (*entry, error) {
	e := &entry{}
	switch g := gen.(type) {
	case nil:
	case string:
		e.gen = g
	default:
		return nil, fmt.Errorf("%w: record %q: gen field is %T", errReply, id, gen)
	}
	switch v := ver.(type) {
	case int64:
		e.ver = v
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: record %q: ver field is %q", errReply, id, v)
		}
		e.ver = n
	default:
		return nil, fmt.Errorf("%w: record %q: ver field is %T", errReply, id, ver)
	}
	r, err := decodeRecord(id, js, kids)
	if err != nil {
		return nil, err
	}
	e.json, e.rec = js.(string), r
	return e, nil
}

// entryFromReply is record i of a conflict reply's gen, ver, json, kids
// quadruples.
func entryFromReply(id string, rest []any, i int) (*entry, error) {
	if len(rest) < 4*(i+1) {
		return nil, fmt.Errorf("%w: %d values for record %d", errReply, len(rest), i+1)
	}
	q := rest[4*i : 4*i+4]
	return newEntry(id, q[0], q[1], q[2], q[3])
}

// replyCode splits a script's array reply into its leading code and the
// rest.
func replyCode(v any) (int64, []any, error) {
	a, ok := v.([]any)
	if !ok || len(a) == 0 {
		return 0, nil, fmt.Errorf("script answered %T", v)
	}
	code, ok := a[0].(int64)
	if !ok {
		return 0, nil, fmt.Errorf("script answered code %T", a[0])
	}
	return code, a[1:], nil
}

// replyIndex is the 0-based record index a {code, i} reply names.
func replyIndex(rest []any, n int) (int, error) {
	if len(rest) != 1 {
		return 0, fmt.Errorf("%d values after the code, want 1", len(rest))
	}
	i, ok := rest[0].(int64)
	if !ok || i < 1 || i > int64(n) {
		return 0, fmt.Errorf("record index %v of %d", rest[0], n)
	}
	return int(i - 1), nil
}

func notFound(id string) error { return fmt.Errorf("%w: %q", trajectory.ErrNotFound, id) }

// idleChain reports a chain none of whose records is busy: each idle
// (READY or WAITING_TOOL) or finished. Its live records then expire after
// the idle retention unless written again; a busy record keeps its whole
// chain, so that no record outlives its parent.
func idleChain(recs []*trajectory.Record) bool {
	for _, r := range recs {
		if !r.State.Terminal() && !idleState(r.State) {
			return false
		}
	}
	return true
}

// idleState is a state in which a record waits on its agent alone.
func idleState(s trajectory.State) bool { return s == trajectory.Ready || s == trajectory.WaitingTool }
