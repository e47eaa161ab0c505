package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestRedisScriptsMatchPrevious runs each script and its previous text
// (below, as it was before the scripts kept their state in locals and
// formatted TATs with %d) side by side on a copy of the same state, at
// the same clock, with random limits, arguments and stored values: the
// replies, every field written and the TTL must be the same, so that
// replicas running either text share keys.
func TestRedisScriptsMatchPrevious(t *testing.T) {
	c := newRedisClient(t)
	ctx := context.Background()
	// The clock is a hash both texts read instead of TIME, and the TTL
	// each sets is recorded, which the texts here are changed to do.
	const clock = "clock"
	rewrite := func(t *testing.T, src string) string {
		t.Helper()
		if n := strings.Count(src, "redis.call('TIME')"); n != 1 {
			t.Fatalf("TIME called %d times in a script", n)
		}
		if n := strings.Count(src, "redis.call('PEXPIRE'"); n != strings.Count(src, "redis.call('PEXPIRE', key, ttl)") || n > 1 {
			t.Fatalf("PEXPIRE called %d times in a script, or not as expected", n)
		}
		src = strings.Replace(src, "redis.call('TIME')", "redis.call('HMGET', KEYS[2], 's', 'us')", 1)
		return strings.Replace(src, "redis.call('PEXPIRE', key, ttl)", "redis.call('PEXPIRE', key, ttl) redis.call('SET', KEYS[3], ttl)", 1)
	}
	type pair struct {
		name      string
		prev, now string
		args      func(r *rand.Rand) []any // after ARGV[1..7]
	}
	amount := func(r *rand.Rand, neg bool) any {
		v := []int64{0, 0, 1, 2, 3, 31, 256, 4000, 166667, 2000000, 10_000_000_000, 1 << 40}[r.IntN(12)]
		if neg && r.IntN(3) == 0 {
			v = -v
		}
		return v
	}
	reported := func(r *rand.Rand) any {
		return []int64{-1, -1, -255, 0, 1, 7, 4000, 2000000, 57804254, 1 << 40}[r.IntN(10)]
	}
	settle := func(r *rand.Rand) []any {
		return []any{amount(r, true), amount(r, true), amount(r, true),
			reported(r), reported(r), reported(r), reported(r), reported(r), reported(r)}
	}
	take := func(r *rand.Rand) []any { return []any{amount(r, false), amount(r, false), amount(r, false)} }
	pairs := []pair{
		{"take", prevTake, takeScript.src, take},
		{"settle", prevSettle, settleScript.src, settle},
		{"settle+take", prevSettleTake, settleTakeScript.src, func(r *rand.Rand) []any { return append(settle(r), take(r)...) }},
		{"headroom", prevHeadroom, headroomScript.src, func(*rand.Rand) []any { return nil }},
		{"cool", prevCool, coolScript.src, func(r *rand.Rand) []any { return []any{[]int64{1, 500, 60001, 3600000}[r.IntN(4)]} }},
	}
	for i := range pairs {
		pairs[i].prev, pairs[i].now = rewrite(t, pairs[i].prev), rewrite(t, pairs[i].now)
	}
	limits := []int64{0, 0, 1, 7, 60, 1000, 10_000_000, 1_000_000_000, 10_000_000_000, 1_000_000_000_000}
	bursts := []int64{0, 1, 2, 7, 60, 166667, 166666667, 1_000_000_000_000}
	// Stored values a key may hold: what the scripts write, with and
	// without a fraction, and what they read as absent.
	stored := func(r *rand.Rand, us int64) string {
		at := us + r.Int64N(200_000_000) - 100_000_000
		switch r.IntN(16) {
		case 0:
			return ""
		case 1:
			return "abc"
		case 2:
			return " " + strconv.FormatInt(at, 10)
		case 3:
			return strconv.FormatInt(at, 10) + "."
		case 4:
			return "." + strconv.FormatInt(at, 10)
		case 5:
			return "-" + strconv.FormatInt(at, 10)
		case 6:
			return "1e15"
		case 7:
			return "0x10"
		case 8:
			return "99999999999999999999"
		case 9:
			return strconv.FormatInt(at, 10) + ".5.5"
		case 10:
			return fmt.Sprintf("%d.%d", at, r.Int64N(1e15))
		case 11:
			return "nan"
		default:
			if r.IntN(2) == 0 {
				return strconv.FormatInt(at, 10)
			}
			return fmt.Sprintf("%d.%012d", at, r.Int64N(1e12))
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	us := int64(1_796_404_818_839_713)
	// What the steps answered, so that a change here that leaves most
	// of them errors or alike shows.
	seen := map[string]int{}
	for trial := range 150 {
		argv := make([]any, 0, 7)
		for range 3 {
			argv = append(argv, limits[r.IntN(len(limits))])
		}
		for range 3 {
			argv = append(argv, bursts[r.IntN(len(bursts))])
		}
		argv = append(argv, r.IntN(2))
		keyOf := func(side string) string { return fmt.Sprintf("%s:{k%d}:b", side, trial) }
		for step := range 40 {
			switch r.IntN(4) {
			case 0:
				us += r.Int64N(2_000_000)
			case 1:
				us += r.Int64N(300_000_000)
			}
			if err := c.HSet(ctx, clock, "s", us/1e6, "us", us%1e6).Err(); err != nil {
				t.Fatal(err)
			}
			if r.IntN(8) == 0 {
				f := []string{"t1", "t2", "t3", "c"}[r.IntN(4)]
				v := stored(r, us)
				for _, side := range []string{"prev", "now"} {
					if err := c.HSet(ctx, keyOf(side), f, v).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			p := pairs[r.IntN(len(pairs))]
			args := append(argv[:7:7], p.args(r)...)
			var replies [2]any
			var states [2]map[string]string
			var ttls [2]string
			for i, side := range []string{"prev", "now"} {
				src := p.prev
				if side == "now" {
					src = p.now
				}
				_ = c.Del(ctx, "ttl:"+side)
				v, err := c.Eval(ctx, src, []string{keyOf(side), clock, "ttl:" + side}, args...).Result()
				if err != nil {
					// The same error, but at its own script and line.
					msg, _, _ := strings.Cut(err.Error(), " script: ")
					v = "error: " + msg
				}
				replies[i] = v
				if states[i], err = c.HGetAll(ctx, keyOf(side)).Result(); err != nil {
					t.Fatal(err)
				}
				ttls[i], _ = c.Get(ctx, "ttl:"+side).Result()
			}
			kind := p.name
			switch v := replies[0].(type) {
			case string:
				kind = "error"
			case []any:
				kind += fmt.Sprint(" ", v[0], v[1] != int64(0))
			}
			seen[kind]++
			if !reflect.DeepEqual(replies[0], replies[1]) || !reflect.DeepEqual(states[0], states[1]) || ttls[0] != ttls[1] {
				t.Fatalf("trial %d step %d: %s %v:\nprevious: %v %v ttl %s\nnow:      %v %v ttl %s",
					trial, step, p.name, args, replies[0], states[0], ttls[0], replies[1], states[1], ttls[1])
			}
		}
	}
	t.Log(seen)
}

// TestRedisTATRoundTrip: a stored TAT, with its fraction or without,
// reads and is written back byte for byte by a settle that moves nothing
// (when the fraction is one a double holds exactly after base: the
// others are TestRedisScriptsMatchPrevious's); one the scripts cannot
// read is a full bucket.
func TestRedisTATRoundTrip(t *testing.T) {
	c := newRedisClient(t)
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	at := now.UnixMicro() + 30_000_000
	// 1e10 tokens a minute: a token is 0.006 µs; bursts of a minute.
	argv := []any{10_000_000, 10_000_000_000, 10_000_000_000, 10_000_000, 10_000_000_000, 10_000_000_000, 0,
		0, 0, 0, -1, -1, -1, -1, -1, -1}
	for _, v := range []string{
		strconv.FormatInt(at, 10),
		strconv.FormatInt(at, 10) + ".500000000000",
		strconv.FormatInt(at, 10) + ".000976562500",
		strconv.FormatInt(at, 10) + ".999023437500",
	} {
		key := "rt:{" + v + "}:b"
		if err := c.HSet(ctx, key, "t1", v, "t2", v, "t3", v).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.EvalSha(ctx, settleScript.hash, []string{key}, argv...).Err(); err != nil && !noScript(err) {
			t.Fatal(err)
		} else if err != nil {
			if err := c.Eval(ctx, settleScript.src, []string{key}, argv...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		got, err := c.HGetAll(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]string{"t1": v, "t2": v, "t3": v}; !reflect.DeepEqual(got, want) {
			t.Errorf("stored %s, written back %v", v, got)
		}
	}
	for _, v := range []string{"", "abc", "1e15", " 1", "-1", "0x10", ".5", "1.2.3", "nan"} {
		key := "rt:{" + v + "}:b"
		if err := c.HSet(ctx, key, "t1", v, "t2", v, "t3", v).Err(); err != nil {
			t.Fatal(err)
		}
		h, err := c.Eval(ctx, headroomScript.src, []string{key}, argv[:7]...).Int64()
		if err != nil || h != 1_000_000 {
			t.Errorf("stored %q: headroom %d, %v; want a full bucket", v, h, err)
		}
	}
}

// TestRedisWriteTat: the scripts write a TAT as the previous text did,
// around whole seconds and thousands of them, and up to and past 2^53 µs,
// where they format it otherwise.
func TestRedisWriteTat(t *testing.T) {
	c := newRedisClient(t)
	src := gcraLua + `
` + strings.Replace(prevWriteTatLua, "function writeTat(", "function prevWriteTat(", 1) + `local bad, n = {}, 0
local edges = {0, floor(base / 1e9) * 1e9 - base, floor(base / 1e6) * 1e6 - base,
  (floor(base / 1e9) + 1) * 1e9 - base, 2^53 - base, 2^53 - 1e9 - base, 9007199e9 - base}
local ds = {-1e9, -2, -1, -0.5, -1e-6, -1e-12, 0, 1e-12, 6e-8, 1e-6, 0.25, 0.4999999999995,
  0.5, 0.9999999999995, 1, 2, 999999, 1e6, 999999999, 1e9, 6e7 + 0.000123}
for _, e in ipairs(edges) do
  for _, d in ipairs(ds) do
    for k = 0, 3 do
      local x = e + d + k * 1e9
      if x >= 0 then
        n = n + 1
        local a, b = writeTat(x), prevWriteTat(x)
        if a ~= b then bad[#bad + 1] = b .. ' written ' .. a end
      end
    end
  end
end
for i = 1, 20000 do
  local x = math.random() * 10 ^ math.random(-3, 9)
  n = n + 1
  local a, b = writeTat(x), prevWriteTat(x)
  if a ~= b then bad[#bad + 1] = b .. ' written ' .. a end
end
bad[#bad + 1] = tostring(n)
return bad
`
	v, err := c.Eval(context.Background(), src, []string{"k"}, 0, 0, 0, 0, 0, 0, 0).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(v[len(v)-1]); len(v) != 1 || n < 20000 {
		t.Errorf("%d of %s TATs written otherwise: %v", len(v)-1, v[len(v)-1], v[:len(v)-1])
	}
}

// prevWriteTatLua is the previous scripts' writeTat, in prevGcraLua and,
// renamed, beside the current one in TestRedisWriteTat.
const prevWriteTatLua = `local function writeTat(x)
  local whole = math.floor(x)
  local f = math.floor((x - whole) * 1e12 + 0.5)
  if f >= 1e12 then whole, f = whole + 1, 0 end
  local s = string.format('%.0f', base + whole)
  if f > 0 then s = s .. string.format('.%012.0f', f) end
  return s
end
`

const prevGcraLua = `
local t = redis.call('TIME')
local base = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = 0
local key = KEYS[1]
local st = redis.call('HMGET', key, 't1', 't2', 't3', 'c')

-- readTat is a stored TAT after base: its whole microseconds, exact, and
-- then its fraction; now when absent or unreadable.
local function readTat(v)
  if not v then return now end
  local whole, frac = string.match(v, '^(%d+)(%.?%d*)$')
  if not whole then return now end
  local x = tonumber(whole) - base
  if #frac > 1 then x = x + tonumber('0' .. frac) end
  return x
end

-- writeTat is x (after base) as stored: whole microseconds of the clock,
-- and the fraction when there is one.
` + prevWriteTatLua + `
local lim, burst, tau, tat = {}, {}, {}, {}
for d = 1, 3 do
  lim[d] = tonumber(ARGV[d])
  burst[d] = tonumber(ARGV[3 + d])
  tau[d] = 0
  if lim[d] > 0 then tau[d] = burst[d] * 60000000 / lim[d] end
  tat[d] = readTat(st[d])
  if tat[d] < now then tat[d] = now end
end
local advisory = ARGV[7] == '1'
local cool = (tonumber(st[4]) or 0) - base

local function interval(d) return 60000000 / lim[d] end

-- capDebt keeps an advisory key's debt (below empty) within a minute.
local function capDebt(d)
  local limit = now + tau[d] + 60000000
  if advisory and tat[d] > limit then tat[d] = limit end
end

-- headroom in millionths: the tightest limited dimension, 0 when cooled.
local function headroom()
  if cool > now then return 0 end
  local h = 1
  for d = 1, 3 do
    if lim[d] > 0 then
      local f = 1 - (tat[d] - now) / tau[d]
      if f < h then h = f end
    end
  end
  if h < 0 then h = 0 end
  return math.floor(h * 1000000)
end

-- save writes the TATs and the cooling, and keeps the hash until they
-- have passed (at least two minutes).
-- One HSET of every field, rather than one each: fewer calls into the
-- server per script.
local function save()
  local horizon = cool - now
  local fields = {}
  for d = 1, 3 do
    if lim[d] > 0 then
      fields[#fields + 1] = 't' .. d
      fields[#fields + 1] = writeTat(tat[d])
      if tat[d] - now > horizon then horizon = tat[d] - now end
    end
  end
  if cool > now then
    fields[#fields + 1] = 'c'
    fields[#fields + 1] = string.format('%.0f', base + cool)
  end
  if #fields > 0 then redis.call('HSET', key, unpack(fields)) end
  local ttl = math.ceil(horizon / 1000) + 1000
  if ttl < 120000 then ttl = 120000 end
  redis.call('PEXPIRE', key, ttl)
end
`

const prevTakeLua = `
local function take(base)
  if cool > now then
    return {0, math.ceil((cool - now) / 1000), 0}
  end
  local wait = 0
  for d = 1, 3 do
    local n = tonumber(ARGV[base + d])
    if lim[d] > 0 and n > 0 and not advisory then
      local need = n
      if need > burst[d] then need = burst[d] end
      local w = (tat[d] - now) - (tau[d] - need * interval(d))
      if w > wait then wait = w end
    end
  end
  if wait > 0 then
    return {0, math.ceil(wait / 1000), headroom()}
  end
  for d = 1, 3 do
    local n = tonumber(ARGV[base + d])
    if lim[d] > 0 and n > 0 then
      tat[d] = tat[d] + n * interval(d)
      capDebt(d)
    end
  end
  return {1, 0, headroom()}
end
`

const prevTake = (prevGcraLua + prevTakeLua + `
local r = take(7)
if r[1] == 1 then save() end
return r
`)

const prevAdjustLua = `
local function adjust(base)
  for d = 1, 3 do
    local n = tonumber(ARGV[base + d])
    if lim[d] > 0 and n ~= 0 then
      tat[d] = tat[d] + n * interval(d)
      if tat[d] < now then tat[d] = now end
      capDebt(d)
    end
  end
end
`

const prevSyncLua = `
local function sync(base)
  for d = 1, 3 do
    if lim[d] > 0 then
      local left = tonumber(ARGV[base + d])
      if left >= 0 then
        local floor = now + tau[d] - left * interval(d)
        if floor > tat[d] then tat[d] = floor end
      end
      local reset = tonumber(ARGV[base + 3 + d])
      if reset >= 0 and left <= 0 then
        local floor = now + reset
        if floor > tat[d] then tat[d] = floor end
      end
    end
  end
end
`

const prevHeadroom = (prevGcraLua + `
return headroom()
`)

const prevCool = (prevGcraLua + `
local untl = now + tonumber(ARGV[8]) * 1000
if untl > cool then cool = untl end
save()
return 0
`)

const prevSettle = (prevGcraLua + prevAdjustLua + prevSyncLua + `
adjust(7)
sync(10)
save()
return 0
`)

const prevSettleTake = (prevGcraLua + prevAdjustLua + prevSyncLua + prevTakeLua + `
adjust(7)
sync(10)
local r = take(16)
save()
return r
`)
