package redis

import (
	"context"
	"fmt"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/ride"
	"gatekeeper/tenant"
)

// Ledger keeps tenants' spend in the Redis of a Store. Each tenant's keys
// share the hash tag t{name}, so that every ledger script touches one
// slot of a cluster; the record-chain scripts never touch them, and a
// call's admission runs the two in turn. Scripts read Redis' TIME: one
// clock for every replica.
type Ledger struct{ s *Store }

var _ tenant.Ledger = (*Ledger)(nil)

// Ledger returns the tenants' ledger kept in the Store's Redis.
func (s *Store) Ledger() *Ledger { return &Ledger{s: s} }

// The tenant's keys: its buckets (fields "h:<hour>:m" and ":t" for micros
// and tokens, "d:<day>:..." likewise), its calls ("<micros> <tokens>
// <expires ms>", or "s s <expires ms>" once settled), its live runs and
// the runs started in the last hour (scored by their start in ms).
func ledgerKeys(name string) []string {
	p := "gk:t{" + name + "}:"
	return []string{p + "spend", p + "calls", p + "live", p + "started"}
}

// ledgerLua reads the clock, drops what left the windows and sums the
// calls in flight; every ledger script starts with it.
const ledgerLua = `
local spend, calls, live, started = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local t = redis.call('TIME')
local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local hour, day = math.floor(tonumber(t[1]) / 3600), math.floor(tonumber(t[1]) / 86400)
for _, k in ipairs(redis.call('HKEYS', spend)) do
  local kind, idx = string.match(k, '^(%a):(%d+):')
  idx = tonumber(idx)
  if idx == nil or (kind == 'h' and idx <= hour - 24) or (kind == 'd' and idx <= day - 30) then
    redis.call('HDEL', spend, k)
  end
end
local resm, rest, inflight = 0, 0, 0
local c = redis.call('HGETALL', calls)
for i = 1, #c, 2 do
  local m, tk, exp = string.match(c[i + 1], '^(%S+) (%S+) (%d+)$')
  if exp == nil or tonumber(exp) <= nowms then
    redis.call('HDEL', calls, c[i])
  elseif m ~= 's' then
    resm, rest, inflight = resm + tonumber(m), rest + tonumber(tk), inflight + 1
  end
end
redis.call('ZREMRANGEBYSCORE', started, '-inf', nowms - 3600000)
local function window(kind, cur, n)
  local out, m, tk = {}, 0, 0
  for i = cur - n + 1, cur do
    local v = redis.call('HMGET', spend, kind .. ':' .. i .. ':m', kind .. ':' .. i .. ':t')
    local vm, vt = tonumber(v[1] or 0), tonumber(v[2] or 0)
    out[#out + 1] = vm
    out[#out + 1] = vt
    m, tk = m + vm, tk + vt
  end
  return out, m, tk
end
`

// usageScript returns the clock (s, µs), the 24 hours' and 30 days'
// buckets (micros, tokens each), the calls in flight (micros, tokens,
// count), the live runs, the runs started in the last hour and the first
// one's start in ms (0 when none).
var usageScript = goredis.NewScript(ledgerLua + `
local hours = window('h', hour, 24)
local days = window('d', day, 30)
local first = redis.call('ZRANGE', started, 0, 0, 'WITHSCORES')
local oldest = 0
if #first == 2 then oldest = tonumber(first[2]) end
return {tonumber(t[1]), tonumber(t[2]), hours, days, {resm, rest, inflight},
  redis.call('SCARD', live), redis.call('ZCARD', started), oldest}
`)

// reserveScript holds ARGV[2] micros and ARGV[3] tokens for call ARGV[1]
// for ARGV[4] ms, if the day's and month's spend and the calls in flight
// leave room under the ceilings ARGV[5..7] (micros a day, a month, tokens
// a day; 0 none). It returns 1 when held, 0 when not.
var reserveScript = goredis.NewScript(ledgerLua + `
local _, dm, dt = window('h', hour, 24)
local _, mm = window('d', day, 30)
local rm, rt = tonumber(ARGV[2]), tonumber(ARGV[3])
local perday, permonth, tokday = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
if (perday > 0 and dm + resm + rm > perday) or (permonth > 0 and mm + resm + rm > permonth)
  or (tokday > 0 and dt + rest + rt > tokday) then
  return 0
end
redis.call('HSET', calls, ARGV[1], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. string.format('%d', nowms + tonumber(ARGV[4])))
redis.call('PEXPIRE', calls, 3600000 + tonumber(ARGV[4]))
return 1
`)

// settleScript ends call ARGV[1] ("" for none), unless already settled,
// and adds ARGV[2] micros and ARGV[3] tokens to the current buckets.
var settleScript = goredis.NewScript(ledgerLua + `
if ARGV[1] ~= '' then
  local v = redis.call('HGET', calls, ARGV[1])
  if v and string.sub(v, 1, 2) == 's ' then return 0 end
  redis.call('HSET', calls, ARGV[1], 's s ' .. string.format('%d', nowms + 3600000))
  redis.call('PEXPIRE', calls, 7200000)
end
for _, f in ipairs({'h:' .. hour, 'd:' .. day}) do
  redis.call('HINCRBY', spend, f .. ':m', ARGV[2])
  redis.call('HINCRBY', spend, f .. ':t', ARGV[3])
end
redis.call('EXPIRE', spend, 31 * 86400)
return 1
`)

// startScript counts run ARGV[1] live (when ARGV[2], the live limit, is
// set) and started (when ARGV[3], the hourly limit, is), unless a limit
// refuses it: {0} when counted, {1} for the live limit, {2, first start
// in ms} for the hourly one.
var startScript = goredis.NewScript(ledgerLua + `
local maxlive, perhour = tonumber(ARGV[2]), tonumber(ARGV[3])
local islive = redis.call('SISMEMBER', live, ARGV[1]) == 1
local isstarted = redis.call('ZSCORE', started, ARGV[1])
if maxlive > 0 and not islive and redis.call('SCARD', live) >= maxlive then return {1} end
if perhour > 0 and not isstarted and redis.call('ZCARD', started) >= perhour then
  local first = redis.call('ZRANGE', started, 0, 0, 'WITHSCORES')
  return {2, tonumber(first[2])}
end
if maxlive > 0 then redis.call('SADD', live, ARGV[1]) end
if perhour > 0 and not isstarted then
  redis.call('ZADD', started, nowms, ARGV[1])
  redis.call('PEXPIRE', started, 3600000)
end
return {0}
`)

// endScript forgets the live runs ARGV.
var endScript = goredis.NewScript(`
if #ARGV > 0 then redis.call('SREM', KEYS[3], unpack(ARGV)) end
return redis.call('SMEMBERS', KEYS[3])
`)

func init() {
	scripts = append(scripts, usageScript, reserveScript, settleScript, startScript, endScript)
}

// Usage implements tenant.Ledger.
func (l *Ledger) Usage(ctx context.Context, name string) (tenant.Usage, error) {
	if err := l.s.usable(ctx); err != nil {
		return tenant.Usage{}, err
	}
	v, err := l.s.eval(ctx, usageScript, ledgerKeys(name), nil, nil)
	if err != nil {
		return tenant.Usage{}, l.s.fail(ctx, "reading a tenant's ledger", err)
	}
	r, ok := v.([]any)
	if !ok || len(r) != 8 {
		return tenant.Usage{}, fmt.Errorf("redis store: tenant ledger: unexpected reply %T", v)
	}
	n := make([]int64, 0, 8)
	for _, i := range []int{0, 1, 5, 6, 7} {
		x, ok := r[i].(int64)
		if !ok {
			return tenant.Usage{}, fmt.Errorf("redis store: tenant ledger: unexpected reply element %T", r[i])
		}
		n = append(n, x)
	}
	u := tenant.Usage{Now: time.Unix(n[0], n[1]*1000).UTC(), Live: n[2], Started: n[3]}
	if n[4] > 0 {
		u.OldestStart = time.UnixMilli(n[4]).UTC()
	}
	hours, err := amounts(r[2], tenant.HourBuckets)
	if err != nil {
		return tenant.Usage{}, err
	}
	days, err := amounts(r[3], tenant.DayBuckets)
	if err != nil {
		return tenant.Usage{}, err
	}
	copy(u.Hours[:], hours)
	copy(u.Days[:], days)
	res, err := ints(r[4], 3)
	if err != nil {
		return tenant.Usage{}, err
	}
	u.Reserved, u.InFlight = tenant.Amount{Micros: res[0], Tokens: res[1]}, res[2]
	return u, nil
}

// ints checks a reply is an array of n integers.
func ints(v any, n int) ([]int64, error) {
	a, ok := v.([]any)
	if !ok || len(a) != n {
		return nil, fmt.Errorf("redis store: tenant ledger: want %d integers, got %T", n, v)
	}
	out := make([]int64, n)
	for i, x := range a {
		if out[i], ok = x.(int64); !ok {
			return nil, fmt.Errorf("redis store: tenant ledger: want an integer, got %T", x)
		}
	}
	return out, nil
}

func amounts(v any, n int) ([]tenant.Amount, error) {
	xs, err := ints(v, 2*n)
	if err != nil {
		return nil, err
	}
	out := make([]tenant.Amount, n)
	for i := range out {
		out[i] = tenant.Amount{Micros: xs[2*i], Tokens: xs[2*i+1]}
	}
	return out, nil
}

// Reserve implements tenant.Ledger.
func (l *Ledger) Reserve(ctx context.Context, name, call string, r tenant.Amount, lim tenant.Limits, ttl time.Duration) (bool, error) {
	if err := l.s.usable(ctx); err != nil {
		return false, err
	}
	v, err := l.s.eval(ctx, reserveScript, ledgerKeys(name), []any{call, r.Micros, r.Tokens, max(ttl.Milliseconds(), 1),
		lim.MicrosPerDay, lim.MicrosPerMonth, lim.TokensPerDay}, nil)
	if err != nil {
		return false, l.s.fail(ctx, "reserving against a tenant's limits", err)
	}
	n, ok := v.(int64)
	if !ok {
		return false, fmt.Errorf("redis store: tenant reserve: unexpected reply %T", v)
	}
	return n == 1, nil
}

// Settle implements tenant.Ledger.
func (l *Ledger) Settle(ctx context.Context, name, call string, used tenant.Amount) error {
	if err := l.s.usable(ctx); err != nil {
		return err
	}
	// A rider the context carries (a flush's key settles) goes in the
	// charge's round trip; on a cluster, to its own node in parallel.
	var before func(goredis.Pipeliner)
	if rider := ride.Take(ctx); rider != nil {
		before = func(p goredis.Pipeliner) { rider.Queue(ctx, l.s.rdb, p) }
	}
	if _, err := l.s.eval(ctx, settleScript, ledgerKeys(name), []any{call, used.Micros, used.Tokens}, before); err != nil {
		return l.s.fail(ctx, "charging a tenant", err)
	}
	return nil
}

// StartRun implements tenant.Ledger.
func (l *Ledger) StartRun(ctx context.Context, name, id string, lim tenant.Limits) (tenant.Start, error) {
	if err := l.s.usable(ctx); err != nil {
		return tenant.Start{}, err
	}
	v, err := l.s.eval(ctx, startScript, ledgerKeys(name), []any{id, lim.MaxLive, lim.NewPerHour}, nil)
	if err != nil {
		return tenant.Start{}, l.s.fail(ctx, "counting a tenant's run", err)
	}
	r, ok := v.([]any)
	if !ok || len(r) == 0 {
		return tenant.Start{}, fmt.Errorf("redis store: tenant run start: unexpected reply %T", v)
	}
	switch code, _ := r[0].(int64); {
	case code == 0:
		return tenant.Start{}, nil
	case code == 1:
		return tenant.Start{Refused: tenant.LimitLive}, nil
	case code == 2 && len(r) == 2:
		first, ok := r[1].(int64)
		if !ok {
			return tenant.Start{}, fmt.Errorf("redis store: tenant run start: unexpected start %T", r[1])
		}
		return tenant.Start{Refused: tenant.LimitNewPerHour, Retry: time.UnixMilli(first).Add(time.Hour).UTC()}, nil
	}
	return tenant.Start{}, fmt.Errorf("redis store: tenant run start: unexpected reply %v", r)
}

// LiveRuns implements tenant.Ledger.
func (l *Ledger) LiveRuns(ctx context.Context, name string) ([]string, error) {
	return l.end(ctx, name, nil)
}

// EndRuns implements tenant.Ledger.
func (l *Ledger) EndRuns(ctx context.Context, name string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := l.end(ctx, name, ids)
	return err
}

func (l *Ledger) end(ctx context.Context, name string, ids []string) ([]string, error) {
	if err := l.s.usable(ctx); err != nil {
		return nil, err
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	v, err := l.s.eval(ctx, endScript, ledgerKeys(name), args, nil)
	if err != nil {
		return nil, l.s.fail(ctx, "listing a tenant's live runs", err)
	}
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("redis store: tenant live runs: unexpected reply %T", v)
	}
	out := make([]string, 0, len(a))
	for _, x := range a {
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("redis store: tenant live runs: unexpected member %T", x)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out, nil
}
