package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// scripter is what Redis needs of a client: running a script by its hash,
// by its text when the server has lost its script cache (a restart), and
// several in one round trip.
type scripter interface {
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *goredis.Cmd
	Eval(ctx context.Context, script string, keys []string, args ...any) *goredis.Cmd
	ScriptLoad(ctx context.Context, script string) *goredis.StringCmd
	Pipeline() goredis.Pipeliner
}

var _ scripter = goredis.UniversalClient(nil)

// Redis keeps keys' capacity in Redis, shared by every replica using the
// same Redis and prefix: each operation is one atomic Lua script doing
// GCRA on the server's clock (see redis_scripts.go). A key's state is one
// hash, "<prefix>rl:{<key id>}:b", whose hash tag keeps it in one Redis
// Cluster slot; it expires once the key is full again.
//
// Like Memory, a cost larger than a dimension's burst is admitted once the
// bucket is full and overdraws it by the excess.
type Redis struct {
	rdb    scripter
	prefix string
	// calls holds each Key's script keys and leading arguments (Key →
	// *keyCall), built once instead of on every script a turn runs.
	calls  sync.Map
	ncalls atomic.Int64
	// fusedSent: settleTakeScript went to the server (SCRIPT LOAD ahead of
	// its first call, in the same pipeline); cleared when a call finds the
	// server without it.
	fusedSent atomic.Bool
	// sliceSent is fusedSent for sliceTakeScript.
	sliceSent atomic.Bool
}

// keyCall is what every script call on one Key starts with.
type keyCall struct {
	keys []string // the key's hash, the scripts' KEYS
	args []any    // its limits, bursts and advisory flag, ARGV[1..7]
}

// maxKeyCalls bounds Redis.calls: keys come from the configuration, and
// each reload that changes a key's limits leaves its old Key behind.
const maxKeyCalls = 4096

var _ Buckets = (*Redis)(nil)

// NewRedis returns buckets kept in Redis under keys starting with prefix.
// The caller owns c.
func NewRedis(c goredis.UniversalClient, prefix string) *Redis {
	return &Redis{rdb: c, prefix: prefix}
}

// ErrReply is wrapped by the errors of a script reply that is not what
// the script answers: a Redis that is not one, or a script mismatch.
var ErrReply = errors.New("ratelimit: unexpected reply from Redis")

func (r *Redis) hashKey(k Key) string { return r.prefix + "rl:{" + k.ID + "}:b" }

// argv is the scripts' arguments for k: its limits, its bursts, whether
// they are advisory, then args.
func argv(k Key, args ...any) []any {
	lim, b := perMinute(k.Limits), bursts(k.Limits)
	advisory := 0
	if k.Advisory {
		advisory = 1
	}
	return append([]any{lim[0], lim[1], lim[2], b[0], b[1], b[2], advisory}, args...)
}

// call is a script call's KEYS and ARGV for k: its hash, then its
// limits (argv) and args.
func (r *Redis) call(k Key, args ...any) ([]string, []any) {
	v, ok := r.calls.Load(k)
	if !ok {
		if r.ncalls.Add(1) > maxKeyCalls {
			r.calls.Clear()
			r.ncalls.Store(1)
		}
		v, _ = r.calls.LoadOrStore(k, &keyCall{keys: []string{r.hashKey(k)}, args: argv(k)})
	}
	kc := v.(*keyCall)
	n := len(kc.args)
	return kc.keys, append(kc.args[:n:n], args...)
}

// run runs sc for k with the key's limits and then args, by hash first.
func (r *Redis) run(ctx context.Context, sc *script, k Key, args ...any) (any, error) {
	keys, argv := r.call(k, args...)
	v, err := r.rdb.EvalSha(ctx, sc.hash, keys, argv...).Result()
	if noScript(err) {
		v, err = r.rdb.Eval(ctx, sc.src, keys, argv...).Result()
	}
	if err != nil {
		return nil, fmt.Errorf("ratelimit: key %s: %w", k.ID, err)
	}
	return v, nil
}

// Take implements Buckets.
func (r *Redis) Take(ctx context.Context, k Key, c Cost) (bool, time.Duration, error) {
	ok, wait, _, err := r.takeHeadroom(ctx, k, c)
	return ok, wait, err
}

// takeHeadroom is Take and then Headroom in one round trip.
func (r *Redis) takeHeadroom(ctx context.Context, k Key, c Cost) (bool, time.Duration, float64, error) {
	if k.Limits.unlimited() {
		return true, 0, 1, nil
	}
	n := amounts(c)
	v, err := r.run(ctx, takeScript, k, n[0], n[1], n[2])
	if err != nil {
		return false, 0, 0, err
	}
	return takeReply(k, v)
}

var _ BatchTaker = (*Redis)(nil)

// TakeBatch implements BatchTaker in one round trip.
func (r *Redis) TakeBatch(ctx context.Context, k Key, cs []Cost) (int, time.Duration, float64, error) {
	switch {
	case len(cs) == 0:
		h, err := r.Headroom(ctx, k)
		return 0, 0, h, err
	case k.Limits.unlimited():
		return len(cs), 0, 1, nil
	case len(cs) == 1:
		ok, wait, h, err := r.takeHeadroom(ctx, k, cs[0])
		if ok {
			return 1, 0, h, err
		}
		return 0, wait, h, err
	}
	args := make([]any, 0, 1+dims*len(cs))
	args = append(args, len(cs))
	for _, c := range cs {
		n := amounts(c)
		args = append(args, n[0], n[1], n[2])
	}
	v, err := r.run(ctx, takeBatchScript, k, args...)
	if err != nil {
		return 0, 0, 0, err
	}
	return takeBatchReply(k, len(cs), v)
}

// takeBatchReply checks the batch take script's reply {costs taken of
// asked, wait ms, headroom in millionths}.
func takeBatchReply(k Key, asked int, v any) (int, time.Duration, float64, error) {
	reply, ok := v.([]any)
	if !ok || len(reply) != 3 {
		return 0, 0, 0, fmt.Errorf("%w: batch take on key %s answered %T %v", ErrReply, k.ID, v, v)
	}
	var ints [3]int64
	for i, e := range reply {
		if ints[i], ok = e.(int64); !ok {
			return 0, 0, 0, fmt.Errorf("%w: batch take on key %s answered %T in %v", ErrReply, k.ID, e, v)
		}
	}
	took, ms, h := ints[0], ints[1], ints[2]
	if took < 0 || took > int64(asked) || h < 0 || h > 1e6 || took < int64(asked) && ms <= 0 {
		return 0, 0, 0, fmt.Errorf("%w: batch take of %d on key %s answered %v", ErrReply, asked, k.ID, v)
	}
	if took == int64(asked) {
		return asked, 0, float64(h) / 1e6, nil
	}
	return int(took), clampWait(time.Duration(ms) * time.Millisecond), float64(h) / 1e6, nil
}

// Headroom implements Buckets.
func (r *Redis) Headroom(ctx context.Context, k Key) (float64, error) {
	v, err := r.run(ctx, headroomScript, k)
	if err != nil {
		return 0, err
	}
	return headroomReply(k, v)
}

// headrooms is Headroom of every key of a pool in one round trip.
func (r *Redis) headrooms(ctx context.Context, keys []Key) ([]float64, error) {
	pipe := r.rdb.Pipeline()
	cmds := make([]*goredis.Cmd, len(keys))
	for i, k := range keys {
		keys, argv := r.call(k)
		cmds[i] = pipe.EvalSha(ctx, headroomScript.hash, keys, argv...)
	}
	// Each command's own error is read below.
	_, _ = pipe.Exec(ctx)
	out := make([]float64, len(keys))
	for i, cmd := range cmds {
		v, err := cmd.Result()
		if noScript(err) {
			// The script cache was lost: one by one, which loads it.
			if out[i], err = r.Headroom(ctx, keys[i]); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ratelimit: key %s: %w", keys[i].ID, err)
		}
		if out[i], err = headroomReply(keys[i], v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// headroomReply checks the headroom script's reply: millionths.
func headroomReply(k Key, v any) (float64, error) {
	n, ok := v.(int64)
	if !ok || n < 0 || n > 1e6 {
		return 0, fmt.Errorf("%w: headroom of key %s answered %T %v", ErrReply, k.ID, v, v)
	}
	return float64(n) / 1e6, nil
}

// Cool implements Buckets. A shorter cooling than one in force does not
// shorten it.
func (r *Redis) Cool(ctx context.Context, k Key, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	v, err := r.run(ctx, coolScript, k, d.Milliseconds()+1)
	return checkZero("cool", k, v, err)
}

// settles reports whether a settle of delta and rem on k has anything to
// write: a limited key, and a correction or a provider's report that
// lowers something.
func settles(k Key, delta Cost, rem Remaining) bool {
	return !k.Limits.unlimited() && !(delta.zero() && (rem.reportsNothing() || lowersNothing(k, rem)))
}

// Settle implements Buckets in one round trip.
func (r *Redis) Settle(ctx context.Context, k Key, delta Cost, rem Remaining) error {
	if !settles(k, delta, rem) {
		return nil
	}
	v, err := r.run(ctx, settleScript, k, settleArgs(delta, rem)...)
	return checkZero("settle", k, v, err)
}

// settleArgs is the settle script's arguments after the key's limits.
func settleArgs(delta Cost, rem Remaining) []any {
	n, left, reset := amounts(delta), reported(rem), resets(rem)
	us := func(d time.Duration) int64 {
		if d < 0 {
			return -1
		}
		return d.Microseconds()
	}
	return []any{n[0], n[1], n[2], left[0], left[1], left[2], us(reset[0]), us(reset[1]), us(reset[2])}
}

var _ BatchSettler = (*Redis)(nil)

// SettleBatch implements BatchSettler: Settle of each key in one pipelined
// round trip (on a cluster, one per node, in parallel); a script the
// server lost is sent again by its text, one key at a time.
func (r *Redis) SettleBatch(ctx context.Context, keys []Key, deltas []Cost, rs []Remaining) []error {
	errs := make([]error, len(keys))
	cmds := make([]*goredis.Cmd, len(keys))
	pipe := r.rdb.Pipeline()
	for i, k := range keys {
		if !settles(k, deltas[i], rs[i]) {
			continue
		}
		keys, argv := r.call(k, settleArgs(deltas[i], rs[i])...)
		cmds[i] = pipe.EvalSha(ctx, settleScript.hash, keys, argv...)
	}
	// Each command's own error is read below.
	_, _ = pipe.Exec(ctx)
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		v, err := cmd.Result()
		if noScript(err) {
			errs[i] = r.Settle(ctx, keys[i], deltas[i], rs[i])
			continue
		}
		if err != nil {
			err = fmt.Errorf("ratelimit: key %s: %w", keys[i].ID, err)
		}
		errs[i] = checkZero("settle", keys[i], v, err)
	}
	return errs
}

// checkZero checks the reply of a script that answers 0.
func checkZero(op string, k Key, v any, err error) error {
	if err != nil {
		return err
	}
	if n, ok := v.(int64); !ok || n != 0 {
		return fmt.Errorf("%w: %s on key %s answered %T %v", ErrReply, op, k.ID, v, v)
	}
	return nil
}

// noScript reports the server's answer that it does not have a script (it
// lost its script cache): run the script again by its text. A nil error
// is checked first, as it is on nearly every call: HasErrorPrefix
// allocates.
func noScript(err error) bool {
	return err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT")
}
