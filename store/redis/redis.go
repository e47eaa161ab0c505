package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/clock"
	"gatekeeper/trajectory"
)

// Defaults for the zero fields of Options.
const (
	DefaultRetention         = 168 * time.Hour
	DefaultMaxEvents         = 10000
	DefaultMaxUpdateAttempts = 100
)

// Backoff between Update attempts that lost a race: full jitter over a
// window that doubles from backoffBase up to backoffMax.
const (
	backoffBase = time.Millisecond
	backoffMax  = 50 * time.Millisecond
)

var (
	// ErrUnavailable wraps every failure to reach Redis or get its answer:
	// the store is unreachable, not the record missing. It matches
	// trajectory.ErrUnavailable, so callers need not know which store
	// they hold.
	ErrUnavailable error = &portError{msg: "redis store: unavailable", port: trajectory.ErrUnavailable}
	// ErrConflict is what Update returns when other writers kept saving the
	// record between its read and its write, MaxUpdateAttempts times.
	ErrConflict = errors.New("redis store: update kept conflicting with concurrent writers")

	errReply = errors.New("redis store: unexpected reply")
)

// portError is a sentinel of this package that also matches the port's
// sentinel it stands for.
type portError struct {
	msg  string
	port error
}

func (e *portError) Error() string { return e.msg }
func (e *portError) Unwrap() error { return e.port }

// Options configures a Store.
type Options struct {
	// URL is a redis:// or rediss:// URL, with go-redis's query
	// parameters (dial_timeout, max_retries...); with Cluster, in go-redis's
	// cluster form (the other nodes as addr= parameters). Ignored when
	// Client is set.
	URL string
	// Cluster says URL names a Redis Cluster.
	Cluster bool
	// Client is used instead of dialing URL: a *goredis.Client or a
	// *goredis.ClusterClient. The Store does not close it: its owner does.
	Client goredis.UniversalClient
	// Retention is how long a finished record and its events are kept.
	// Zero or less means DefaultRetention.
	Retention time.Duration
	// IdleRetention is how long a record idle (READY or WAITING_TOOL),
	// with no busy record in its chain, is kept after its last write;
	// zero keeps it.
	IdleRetention time.Duration
	// MaxEventsPerTrajectory bounds each event log, approximately (XADD
	// MAXLEN ~): Redis trims whole stream nodes, so a log may hold up to
	// about a hundred more. Zero or less means DefaultMaxEvents.
	MaxEventsPerTrajectory int
	// MaxUpdateAttempts bounds how many times Update and UpdateChain run
	// fn and try to save before returning ErrConflict. Zero or less means
	// DefaultMaxUpdateAttempts.
	MaxUpdateAttempts int
	// CacheEntries bounds how many records the Store remembers between
	// calls, so that an update of a chain no one else changed takes one
	// round trip. Zero or less means DefaultCacheEntries.
	CacheEntries int
	// Clock dates index expiry; default time.Now. Records keep the times
	// their callers set, and TTLs are relative, so replicas' clocks only
	// decide when the List index forgets an expired record.
	Clock func() time.Time
}

// rediser is what the Store needs of a Redis client: exactly the commands
// it sends outside scripts and pipelines, plus scripting.
type rediser interface {
	goredis.Scripter
	Ping(ctx context.Context) *goredis.StatusCmd
	HMGet(ctx context.Context, key string, fields ...string) *goredis.SliceCmd
	Get(ctx context.Context, key string) *goredis.StringCmd
	SetNX(ctx context.Context, key string, value any, expiration time.Duration) *goredis.BoolCmd
	ZRangeArgs(ctx context.Context, z goredis.ZRangeArgs) *goredis.StringSliceCmd
	Pipeline() goredis.Pipeliner
	Exists(ctx context.Context, keys ...string) *goredis.IntCmd
	ZRangeWithScores(ctx context.Context, key string, start, stop int64) *goredis.ZSliceCmd
	ZRem(ctx context.Context, key string, members ...any) *goredis.IntCmd
	SAdd(ctx context.Context, key string, members ...any) *goredis.IntCmd
	SMembers(ctx context.Context, key string) *goredis.StringSliceCmd
	Publish(ctx context.Context, channel string, message any) *goredis.IntCmd
	Subscribe(ctx context.Context, channels ...string) *goredis.PubSub
	SPublish(ctx context.Context, channel string, message any) *goredis.IntCmd
	SSubscribe(ctx context.Context, channels ...string) *goredis.PubSub
}

var _ rediser = goredis.UniversalClient(nil)

// Store keeps records and event logs in Redis. It is safe for concurrent
// use, and any number of Stores, in any number of processes, may share one
// Redis.
type Store struct {
	rdb         rediser
	closeClient func() error // nil when the caller owns the client
	cluster     bool         // rdb is a cluster client: signals go over sharded pub/sub

	retention   time.Duration
	idle        time.Duration
	maxEvents   int
	maxAttempts int
	now         func() time.Time
	jitter      func(time.Duration) time.Duration
	newGen      func() uint64

	cache *cache
	locks *treeLocks
	pipes *sharedPipes // updates' scripts, sent together

	dir       *shardDir     // slots holding record indexes
	pruneNext atomic.Uint64 // where the next prune starts in the directory

	subs      pubsubs
	sigCounts signalCounts
	clock     redisClock

	closed atomic.Bool
}

var _ trajectory.Store = (*Store)(nil)

// Open connects to Redis, checks that it answers and loads the scripts.
func Open(ctx context.Context, opts Options) (*Store, error) {
	s := &Store{
		retention:   opts.Retention,
		idle:        opts.IdleRetention,
		maxEvents:   opts.MaxEventsPerTrajectory,
		maxAttempts: opts.MaxUpdateAttempts,
		now:         opts.Clock,
		jitter:      func(d time.Duration) time.Duration { return rand.N(d) },
		newGen:      rand.Uint64,
		cache:       newCache(opts.CacheEntries),
		locks:       newTreeLocks(),
		dir:         &shardDir{key: recordSlots},
	}
	if s.retention <= 0 {
		s.retention = DefaultRetention
	}
	if s.maxEvents <= 0 {
		s.maxEvents = DefaultMaxEvents
	}
	if s.maxAttempts <= 0 {
		s.maxAttempts = DefaultMaxUpdateAttempts
	}
	if s.now == nil {
		s.now = time.Now
	}
	client := opts.Client
	if client == nil {
		var err error
		if client, err = dial(opts.URL, opts.Cluster); err != nil {
			return nil, err
		}
		s.closeClient = client.Close
	}
	_, s.cluster = client.(*goredis.ClusterClient)
	s.rdb = client
	s.pipes = &sharedPipes{rdb: client}
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		err = s.fail(ctx, "PING", err)
		_ = s.Close()
		return nil, err
	}
	for _, sc := range scripts {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			err = s.fail(ctx, "loading scripts", err)
			_ = s.Close()
			return nil, err
		}
	}
	if err := s.migrateIndexes(ctx); err != nil {
		err = s.fail(ctx, "moving the record indexes of an earlier version", err)
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// NewClient returns a client of the Redis at rawURL, set up as the Store sets
// up its own, for a caller that shares one client between the record store,
// the approvals store and the rate-limit buckets. The caller closes it.
func NewClient(rawURL string) (*goredis.Client, error) {
	o, err := goredis.ParseURL(rawURL)
	if err != nil {
		return nil, urlError(err)
	}
	setRetries(&o.DialerRetries, &o.MaxRetries)
	// A caller's deadline, not a fixed read timeout, bounds each call.
	o.ContextTimeoutEnabled = true
	return goredis.NewClient(o), nil
}

// NewClusterClient is NewClient for a Redis Cluster, whose rawURL is in
// go-redis's cluster form: redis://[:password@]host:port?addr=host:port&...
// (rediss:// for TLS), any nodes of the cluster.
func NewClusterClient(rawURL string) (*goredis.ClusterClient, error) {
	o, err := goredis.ParseClusterURL(rawURL)
	if err != nil {
		return nil, urlError(err)
	}
	setRetries(&o.DialerRetries, &o.MaxRetries)
	o.ContextTimeoutEnabled = true
	return goredis.NewClusterClient(o), nil
}

// setRetries sets what go-redis does with a command whose connection
// failed. Callers fail closed and retry at their own level, so a dead
// Redis is reported after one redial, not after go-redis's default of
// about two seconds of them. And a command is never sent again by the
// library: a script whose reply was lost (a timeout, a reset) may have
// run, and running it again is safe only where the caller knows it is
// (see Store.read, and the call ids of the proxy's record updates). A
// URL's max_retries still wins.
func setRetries(dialer, commands *int) {
	*dialer = 1
	if *commands == 0 {
		*commands = -1
	}
}

// dial is NewClient or NewClusterClient.
func dial(rawURL string, cluster bool) (goredis.UniversalClient, error) {
	if cluster {
		return NewClusterClient(rawURL)
	}
	return NewClient(rawURL)
}

// urlError says what is wrong with a Redis URL, not what it is: it may
// carry a password. url.Error quotes the whole URL; go-redis's own errors
// name only the faulty part.
func urlError(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return fmt.Errorf("redis store: parsing the Redis URL: %w", err)
}

// Close makes every later call return trajectory.ErrClosed, ends every
// subscription (closing its channel) and closes the client the Store
// dialed itself.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.subs.closeAll()
	if s.closeClient == nil {
		return nil
	}
	return s.closeClient()
}

// usable reports why the store cannot serve a call.
func (s *Store) usable(ctx context.Context) error {
	if s.closed.Load() {
		return trajectory.ErrClosed
	}
	return ctx.Err()
}

// fail wraps a Redis error so that callers can tell it apart: ErrClosed
// once closed, context.Canceled when the caller left, an error reply that
// can never succeed as it is, and ErrUnavailable for everything else:
// refused, timed out, reset, or a reply that says "not now" (see
// notNowReply).
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if s.closed.Load() || errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("redis store: %s: %w", op, trajectory.ErrClosed)
	}
	cerr := ctx.Err()
	if dl, ok := ctx.Deadline(); ok && cerr == nil && timeout(err) && time.Until(dl) <= 0 {
		// The connection's deadline is the context's: it fired a moment
		// before the context says so.
		cerr = context.DeadlineExceeded
	}
	if cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w (%w)", cerr, err)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("redis store: %s: %w", op, err)
	}
	if permanentReply(err) {
		return fmt.Errorf("redis store: %s: Redis replied: %w", op, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
}

// timeout reports a network timeout.
func timeout(err error) bool {
	var nerr net.Error
	return errors.As(err, &nerr) && nerr.Timeout()
}

// notNow are the error replies, by their first word (or words), with
// which Redis says it cannot serve a command at the moment but will: it
// is loading its data, it is a replica (READONLY, after a failover), its
// master is down, a script or module holds it (BUSY), a slot is moving or
// the cluster is down (TRYAGAIN, CLUSTERDOWN, MOVED and ASK left after
// the client's redirects), too few replicas acknowledge (NOREPLICAS), it
// is out of memory, or it has as many clients as it takes.
var notNow = []string{
	"LOADING", "READONLY", "MASTERDOWN", "BUSY", "TRYAGAIN", "CLUSTERDOWN",
	"MOVED", "ASK", "NOREPLICAS", "OOM", "ERR max number of clients reached",
}

// permanentReply reports an error reply of Redis that is not in notNow:
// sent again, the same command would fail again.
func permanentReply(err error) bool {
	var rerr goredis.Error
	if !errors.As(err, &rerr) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	msg := rerr.Error()
	for _, p := range notNow {
		if rest, ok := strings.CutPrefix(msg, p); ok && (rest == "" || rest[0] == ' ') {
			return false
		}
	}
	return true
}

// Ping implements trajectory.Store.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return s.fail(ctx, "PING", err)
	}
	return nil
}

// Get implements trajectory.Store in one round trip. It always reads:
// the cache only saves updates a read.
func (s *Store) Get(ctx context.Context, id string) (*trajectory.Record, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	e, err := s.readOne(ctx, id)
	if err != nil {
		return nil, err
	}
	return e.rec.Clone(), nil
}

// readOne reads one record; the entry's record is shared with the cache.
func (s *Store) readOne(ctx context.Context, id string) (*entry, error) {
	if id == "" || checkID(id) != nil {
		return nil, notFound(id)
	}
	got, err := s.read(ctx, []string{id})
	if err != nil {
		return nil, err
	}
	e := got[id]
	if e == nil {
		return nil, notFound(id)
	}
	return e, nil
}

// Create implements trajectory.Store in one round trip: one script checks
// that the id is free and the parent exists, then saves the record, its
// events, its index entry and the parent's new child.
func (s *Store) Create(ctx context.Context, rec *trajectory.Record, evs ...trajectory.Event) error {
	return s.create(ctx, rec, 0, evs)
}

// CreateChild implements trajectory.Store in the same round trip as
// Create: the script that adds the child counts the parent's children
// first.
func (s *Store) CreateChild(ctx context.Context, rec *trajectory.Record, max int, evs ...trajectory.Event) error {
	if rec.ParentID == "" {
		return fmt.Errorf("%w: child record %q names no parent", trajectory.ErrInvalidRecord, rec.ID)
	}
	return s.create(ctx, rec, max, evs)
}

// create saves rec, a child only while its parent has fewer than
// maxChildren children (0: no bound).
func (s *Store) create(ctx context.Context, rec *trajectory.Record, maxChildren int, evs []trajectory.Event) error {
	if err := rec.Validate(); err != nil {
		return err
	}
	if len(rec.Children) > 0 {
		return fmt.Errorf("%w: new record %q already lists children", trajectory.ErrInvalidRecord, rec.ID)
	}
	if err := checkID(rec.ID); err != nil {
		return err
	}
	if err := s.usable(ctx); err != nil {
		return err
	}
	js, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	parentKey, child := recKey(rec.ID), ""
	if rec.ParentID != "" {
		if checkID(rec.ParentID) != nil {
			return fmt.Errorf("parent of %q: %w: %q", rec.ID, trajectory.ErrNotFound, rec.ParentID)
		}
		b, err := json.Marshal(rec.ID)
		if err != nil {
			return fmt.Errorf("redis store: encoding id %q: %w", rec.ID, err)
		}
		parentKey, child = recKey(rec.ParentID), string(b)
	}
	m := member(rec.ID, rec.CreatedAt)
	var retention, expireAt int64
	switch {
	case rec.State.Terminal():
		retention, expireAt = s.retention.Milliseconds(), s.now().Add(s.retention).UnixMilli()
	case idleState(rec.State) && s.idle > 0:
		retention, expireAt = s.idle.Milliseconds(), s.now().Add(s.idle).UnixMilli()
	}
	gen := strconv.FormatUint(s.newGen(), 36)
	args, err := eventArgs([]any{js, child, m, retention, expireAt, s.maxEvents, gen, max(maxChildren, 0)}, evs)
	if err != nil {
		return err
	}
	shard := shardOf(rootOf(rec.ID))
	known, err := s.dir.ensure(ctx, s.rdb, shard)
	if err != nil {
		return s.fail(ctx, "SADD "+recordSlots, err)
	}
	var before func(goredis.Pipeliner)
	if known || rec.State == trajectory.CallingModel {
		before = func(p goredis.Pipeliner) {
			if known {
				s.dir.again(ctx, p, shard)
			}
			if rec.State == trajectory.CallingModel {
				p.ZAdd(ctx, idxCalling(shard), goredis.Z{Score: s.callingScore(), Member: m})
			}
		}
	}
	keys := []string{recKey(rec.ID), evKey(rec.ID), parentKey, idxCreated(shard), idxExpires(shard)}
	reply, err := s.eval(ctx, createScript, keys, args, before)
	if err != nil {
		return s.fail(ctx, "create "+rec.ID, err)
	}
	code, rest, err := replyCode(reply)
	if err != nil {
		return fmt.Errorf("%w: create %s: %w", errReply, rec.ID, err)
	}
	switch code {
	case replyOK:
		saved := rec.Clone()
		saved.Children = nil
		s.cache.put(&entry{gen: gen, ver: 1, json: js, rec: saved})
		if rec.ParentID != "" {
			return s.gainedChild(rec.ParentID, rec.ID, rest)
		}
		return nil
	case replyExists:
		return fmt.Errorf("%w: %q", trajectory.ErrExists, rec.ID)
	case replyNoParent:
		return fmt.Errorf("parent of %q: %w: %q", rec.ID, trajectory.ErrNotFound, rec.ParentID)
	case replyChildrenFull:
		var last string
		if len(rest) == 1 {
			last, _ = rest[0].(string)
		}
		if last == "" {
			return fmt.Errorf("%w: create %s: children full without the last child", errReply, rec.ID)
		}
		return &trajectory.ChildrenFullError{Parent: rec.ParentID, Last: last, Max: maxChildren}
	}
	return fmt.Errorf("%w: create %s: script answered %d", errReply, rec.ID, code)
}

// gainedChild brings the cached parent up to date after Create added a
// child to it, if the cache held the version just before; otherwise the
// copy is stale and is dropped. rest is the script's parent gen and
// version.
func (s *Store) gainedChild(parent, child string, rest []any) error {
	if len(rest) != 2 {
		return fmt.Errorf("%w: create %s: %d values after the code, want 2", errReply, child, len(rest))
	}
	gen, _ := rest[0].(string) // nil for a record older than gens
	ver, ok := rest[1].(int64)
	if !ok {
		return fmt.Errorf("%w: create %s: parent version is %T", errReply, child, rest[1])
	}
	old := s.cache.get(parent)
	if old == nil || old.gen != gen || old.ver != ver-1 {
		s.cache.drop(parent)
		return nil
	}
	r := old.rec.Clone()
	r.Children = append(r.Children, child)
	s.cache.put(&entry{gen: gen, ver: ver, json: old.json, rec: r})
	return nil
}

// backoff waits out waitBackoff with the Store's jitter.
func (s *Store) backoff(ctx context.Context, attempt int) error {
	return waitBackoff(ctx, attempt, s.jitter)
}

// waitBackoff waits a random time, drawn by jitter, in a window that doubles
// with each attempt, so that writers that collided do not collide again in
// lockstep.
func waitBackoff(ctx context.Context, attempt int, jitter func(time.Duration) time.Duration) error {
	window := backoffBase << min(attempt-1, 16)
	return clock.Sleep(ctx, jitter(min(window, backoffMax)))
}

// AppendEvents implements trajectory.Store in one round trip.
func (s *Store) AppendEvents(ctx context.Context, id string, evs ...trajectory.Event) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if err := checkID(id); err != nil {
		return fmt.Errorf("%w: %q", trajectory.ErrNotFound, id)
	}
	args, err := eventArgs([]any{s.maxEvents}, evs)
	if err != nil {
		return err
	}
	v, err := s.eval(ctx, appendScript, []string{recKey(id), evKey(id)}, args, nil)
	if err != nil {
		return s.fail(ctx, "append events "+id, err)
	}
	reply, ok := v.(int64)
	if !ok {
		return fmt.Errorf("%w: append events %s: script answered %T", errReply, id, v)
	}
	switch reply {
	case replyOK:
		return nil
	case replyNotFound:
		return fmt.Errorf("%w: %q", trajectory.ErrNotFound, id)
	}
	return fmt.Errorf("%w: append events %s: script answered %d", errReply, id, reply)
}

// Events implements trajectory.Store in one round trip: EXISTS on the
// record, to tell a missing record from an empty log, and XRANGE from the
// entry after afterSeq.
func (s *Store) Events(ctx context.Context, id string, afterSeq int64, limit int) ([]trajectory.Event, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	if err := checkID(id); err != nil {
		return nil, fmt.Errorf("%w: %q", trajectory.ErrNotFound, id)
	}
	start := "-"
	if afterSeq > 0 {
		start = fmt.Sprintf("(0-%d", afterSeq)
	}
	pipe := s.rdb.Pipeline()
	exists := pipe.Exists(ctx, recKey(id))
	xr := pipe.XRangeN(ctx, evKey(id), start, "+", int64(trajectory.PageLimit(limit)))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, s.fail(ctx, "events "+id, err)
	}
	if exists.Val() == 0 {
		return nil, fmt.Errorf("%w: %q", trajectory.ErrNotFound, id)
	}
	msgs := xr.Val()
	if len(msgs) == 0 {
		return nil, nil
	}
	out := make([]trajectory.Event, len(msgs))
	for i, m := range msgs {
		ev, err := decodeEvent(id, m.ID, m.Values)
		if err != nil {
			return nil, err
		}
		out[i] = ev
	}
	return out, nil
}

// eval runs a script, with the commands of before sent ahead of it in the
// same round trip, which it shares with the updates sent at the same time
// (sharedPipes). EVALSHA falls back to EVAL when the server has lost its
// script cache (a restart).
func (s *Store) eval(ctx context.Context, sc *goredis.Script, keys []string, args []any, before func(goredis.Pipeliner)) (any, error) {
	pipe := s.rdb.Pipeline() // the commands' builder, never executed itself
	if before != nil {
		before(pipe)
	}
	cmd := sc.EvalSha(ctx, pipe, keys, args...)
	if err := s.pipes.exec(ctx, pipe.Cmds()); err != nil {
		return nil, err
	}
	// Only the script's own result decides: the commands before it are
	// bookkeeping that must not turn a saved update into a failure.
	if noScript(cmd.Err()) {
		cmd = sc.Eval(ctx, s.rdb, keys, args...)
	}
	return cmd.Result()
}
