package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
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
// and tokens, "d:<day>:..." likewise, and "swept", the hour whose old
// buckets were last dropped), its calls in flight ("<micros> <tokens>",
// beside their running sums in fields "#m", "#t" and "#n", which no call
// id starts with, so that the sums expire with the calls they sum), when
// each call lapses (scored in ms), its live runs and the runs started in the last hour (scored
// by their start in ms). A settled call is a key of its own
// (settledKey), gone after settledKeptMs. Nothing a script does walks
// what a tenant keeps: a busy tenant settles many thousands of calls an
// hour, and a turn must not cost more for them.
func ledgerKeys(name string) []string {
	p := "gk:t{" + name + "}:"
	return []string{p + "spend", p + "held", p + "lapses", p + "live", p + "started"}
}

// settledKey marks call settled for the tenant; it shares the tenant's
// hash tag.
func settledKey(name, call string) string { return "gk:t{" + name + "}:settled:" + call }

// settledKeptMs is how long a settled call is remembered: longer than any
// charge is retried.
const settledKeptMs = 3600000

var settledKeptLua = strconv.Itoa(settledKeptMs)

// clockLua names the tenant's keys and reads the clock; every ledger
// script but endScript starts with it.
const clockLua = `
local spend, held, lapses, live, started = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local t = redis.call('TIME')
local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local hour, day = math.floor(tonumber(t[1]) / 3600), math.floor(tonumber(t[1]) / 86400)
`

// unholdLua defines unhold, which forgets a call's reservation. Sums go
// down by 0 - x, never -x: Redis reads the "-0" that -0 formats to as no
// integer.
const unholdLua = `
-- unhold forgets the reservation of call id, if it has one.
local function unhold(id)
  local v = redis.call('HGET', held, id)
  if not v then return end
  local m, tk = string.match(v, '^(%S+) (%S+)$')
  redis.call('HDEL', held, id)
  redis.call('ZREM', lapses, id)
  redis.call('HINCRBY', held, '#m', 0 - tonumber(m))
  redis.call('HINCRBY', held, '#t', 0 - tonumber(tk))
  redis.call('HINCRBY', held, '#n', -1)
end
`

// bucketsLua drops the buckets that left the windows, once an hour, and
// counts again the windows' sums from the buckets left: fields "=hm" and
// "=ht" (the 24 hours' micros and tokens) and "=dm" (the 30 days'
// micros), which a settle raises with its buckets. A reserve then reads
// three fields, not the 108 of the windows' buckets. A hash without the
// sums (written before they were kept) is counted at once. The spend
// hash holds at most the windows' buckets, however long a tenant lives.
const bucketsLua = `
local swept = redis.call('HMGET', spend, 'swept', '=dm')
if swept[1] ~= tostring(hour) or not swept[2] then
  local all = redis.call('HGETALL', spend)
  local hm, ht, dm = 0, 0, 0
  for i = 1, #all, 2 do
    local k, v = all[i], tonumber(all[i + 1]) or 0
    local kind, idx, what = string.match(k, '^(%a):(%d+):(%a)$')
    idx = tonumber(idx)
    if idx == nil then
      if k ~= 'swept' and k ~= '=hm' and k ~= '=ht' and k ~= '=dm' then redis.call('HDEL', spend, k) end
    elseif (kind == 'h' and idx <= hour - 24) or (kind == 'd' and idx <= day - 30) then
      redis.call('HDEL', spend, k)
    elseif kind == 'h' and idx <= hour then
      if what == 'm' then hm = hm + v elseif what == 't' then ht = ht + v end
    elseif kind == 'd' and idx <= day and what == 'm' then
      dm = dm + v
    end
  end
  redis.call('HSET', spend, 'swept', tostring(hour), '=hm', string.format('%.0f', hm),
    '=ht', string.format('%.0f', ht), '=dm', string.format('%.0f', dm))
end
`

// ledgerLua is what a script that reads the ledger starts with: the
// clock, unhold and the buckets, then it drops the reservations that
// lapsed, reads the sums of the calls in flight, and defines window. At
// most 256 lapsed reservations leave per script: the rest leave in the
// next, and until then count as held, which errs toward refusing. A settle reads nothing and starts with the
// clock, unhold and the buckets alone.
const ledgerLua = clockLua + unholdLua + bucketsLua + `
-- Sums go down by 0 - x, never -x: Redis reads the "-0" that -0 formats
-- to as no integer.
local lapsed = redis.call('ZRANGEBYSCORE', lapses, '-inf', nowms, 'LIMIT', 0, 256)
if #lapsed > 0 then
  local dm, dt, dn = 0, 0, 0
  for _, id in ipairs(lapsed) do
    local v = redis.call('HGET', held, id)
    if v then
      local m, tk = string.match(v, '^(%S+) (%S+)$')
      dm, dt, dn = dm + tonumber(m), dt + tonumber(tk), dn + 1
      redis.call('HDEL', held, id)
    end
  end
  redis.call('ZREM', lapses, unpack(lapsed))
  if dn > 0 then
    redis.call('HINCRBY', held, '#m', 0 - dm)
    redis.call('HINCRBY', held, '#t', 0 - dt)
    redis.call('HINCRBY', held, '#n', 0 - dn)
  end
end
local s = redis.call('HMGET', held, '#m', '#t', '#n')
local resm, rest, inflight = tonumber(s[1] or 0), tonumber(s[2] or 0), tonumber(s[3] or 0)
redis.call('ZREMRANGEBYSCORE', started, '-inf', nowms - 3600000)
-- window reads the n buckets of kind up to cur in one HMGET.
local function window(kind, cur, n)
  local fields = {}
  for i = cur - n + 1, cur do
    fields[#fields + 1] = kind .. ':' .. i .. ':m'
    fields[#fields + 1] = kind .. ':' .. i .. ':t'
  end
  local v = redis.call('HMGET', spend, unpack(fields))
  local out, m, tk = {}, 0, 0
  for i = 1, #v, 2 do
    local vm, vt = tonumber(v[i] or 0), tonumber(v[i + 1] or 0)
    out[i], out[i + 1] = vm, vt
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
// leave room under the ceilings ARGV[5..8] (micros a day, a month, tokens
// a day, micros a week; 0 none). It returns 1 when held, 0 when not.
var reserveScript = goredis.NewScript(ledgerLua + `
local sums = redis.call('HMGET', spend, '=hm', '=ht', '=dm')
local dm, dt, mm = tonumber(sums[1] or 0), tonumber(sums[2] or 0), tonumber(sums[3] or 0)
local rm, rt = tonumber(ARGV[2]), tonumber(ARGV[3])
local perday, permonth, tokday, perweek = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8] or 0)
local wm = 0
if perweek > 0 then
  local _, w = window('d', day, 7)
  wm = w
end
if (perday > 0 and dm + resm + rm > perday) or (permonth > 0 and mm + resm + rm > permonth)
  or (tokday > 0 and dt + rest + rt > tokday) or (perweek > 0 and wm + resm + rm > perweek) then
  return 0
end
unhold(ARGV[1])
redis.call('HSET', held, ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
redis.call('ZADD', lapses, nowms + tonumber(ARGV[4]), ARGV[1])
redis.call('HINCRBY', held, '#m', ARGV[2])
redis.call('HINCRBY', held, '#t', ARGV[3])
redis.call('HINCRBY', held, '#n', 1)
-- Both outlive the longest reservation in them.
local ttl = 3600000 + tonumber(ARGV[4])
for _, k in ipairs({held, lapses}) do
  if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
end
return 1
`)

// settleScript ends call ARGV[1] ("" for none), unless already settled
// (KEYS[6], its mark, exists), and adds ARGV[2] micros and ARGV[3] tokens
// to the current buckets.
var settleScript = goredis.NewScript(clockLua + unholdLua + bucketsLua + `
if ARGV[1] ~= '' then
  if not redis.call('SET', KEYS[6], '1', 'PX', ` + settledKeptLua + `, 'NX') then return 0 end
  unhold(ARGV[1])
end
for _, f in ipairs({'h:' .. hour, 'd:' .. day}) do
  redis.call('HINCRBY', spend, f .. ':m', ARGV[2])
  redis.call('HINCRBY', spend, f .. ':t', ARGV[3])
end
redis.call('HINCRBY', spend, '=hm', ARGV[2])
redis.call('HINCRBY', spend, '=ht', ARGV[3])
redis.call('HINCRBY', spend, '=dm', ARGV[2])
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
if #ARGV > 0 then redis.call('SREM', KEYS[4], unpack(ARGV)) end
return redis.call('SMEMBERS', KEYS[4])
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
		lim.MicrosPerDay, lim.MicrosPerMonth, lim.TokensPerDay, lim.MicrosPerWeek}, nil)
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
	keys := append(ledgerKeys(name), settledKey(name, call))
	if _, err := l.s.eval(ctx, settleScript, keys, []any{call, used.Micros, used.Tokens}, before); err != nil {
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
