package ratelimit

import (
	"crypto/sha1"
	"encoding/hex"
)

// script is a Lua script and its SHA1, by which Redis caches it.
type script struct{ src, hash string }

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, hash: hex.EncodeToString(sum[:])}
}

// The scripts keep one hash per key: fields t1, t2, t3 hold the
// theoretical arrival time (TAT, microseconds of the Redis server's clock)
// of requests, input tokens and output tokens, and c the time the key is
// cooled until. GCRA: a dimension with limit L per minute emits a unit
// every T = 60e6/L µs and holds a burst of B units (tau = B*T µs); what is
// left at now is (tau - (TAT - now)) / T. A TAT in the past is a full
// bucket, so the hash may expire once every TAT and the cooling have
// passed. Memory runs the same algorithm (gcra in memory.go).
//
// Every script reads the server's TIME, so all replicas share one clock.
// ARGV[1..3] are the key's limits (0 = unlimited), ARGV[4..6] its bursts
// and ARGV[7] 1 when its limits are advisory (a take never waits, and its
// debt below empty is kept within a minute); each script's own arguments
// follow from ARGV[8]. The scripts ignore a dimension whose limit is 0.
//
// A take can be worth far less than a microsecond (a request at 1G a
// minute is 0.06 µs, a token at 1T a minute 0.00006 µs), and Lua's
// numbers, doubles, hold a time of the clock only to a quarter of one.
// So the scripts count every time from base, the whole microsecond of
// TIME at the script's start (now is 0), where a double is exact to far
// below a nanosecond, and a TAT is written as whole microseconds of the
// clock with its fraction to 1e-12 µs after a point ("1733300000123456"
// or "1733300000123456.000000060000"; tonumber reads either, to a quarter
// microsecond).
const gcraLua = `
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
local function writeTat(x)
  local whole = math.floor(x)
  local f = math.floor((x - whole) * 1e12 + 0.5)
  if f >= 1e12 then whole, f = whole + 1, 0 end
  local s = string.format('%.0f', base + whole)
  if f > 0 then s = s .. string.format('.%012.0f', f) end
  return s
end

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

// takeLua defines take(base), which admits ARGV[base+1..base+3]
// (requests, input, output) if every limited dimension has room for it, a
// cost above the burst needing a full bucket, moving the TATs, and answers
// {1, 0, headroom}; or answers {0, wait ms, headroom}, taking nothing. An
// advisory key admits at once. The caller saves.
const takeLua = `
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

// takeScript is take(7): it takes ARGV[8..10] and answers take's reply.
var takeScript = newScript(gcraLua + takeLua + `
local r = take(7)
if r[1] == 1 then save() end
return r
`)

// adjustLua defines adjust(base), which moves each TAT by ARGV[base+1..
// base+3] units: forward takes, back gives capacity back, never past now
// (a full bucket).
const adjustLua = `
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

// syncLua defines sync(base), which lowers what is left in each dimension
// to ARGV[base+1..base+3] (< 0: not reported) and, where that is 0 or not
// reported, to what a bucket full only in ARGV[base+4..base+6] µs (< 0:
// not reported) holds, by moving its TAT forward, never back.
const syncLua = `
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

// headroomScript answers the key's headroom in millionths.
var headroomScript = newScript(gcraLua + `
return headroom()
`)

// coolScript cools the key until now + ARGV[8] ms, unless it is cooled
// longer already. Answers 0.
var coolScript = newScript(gcraLua + `
local untl = now + tonumber(ARGV[8]) * 1000
if untl > cool then cool = untl end
save()
return 0
`)

// settleScript adjusts by ARGV[8..10] and then syncs to ARGV[11..16], in
// one round trip. Answers 0.
var settleScript = newScript(gcraLua + adjustLua + syncLua + `
adjust(7)
sync(10)
save()
return 0
`)

// settleTakeScript is settleScript's settle (ARGV[8..16]) and then
// takeScript's take (ARGV[17..19]) on one key, in one call: a turn's take
// carrying the settle of the turn before it on the same key (see Fuse),
// which the take then sees. The settle is saved whatever the take
// answers; the reply is the take's.
var settleTakeScript = newScript(gcraLua + adjustLua + syncLua + takeLua + `
adjust(7)
sync(10)
local r = take(16)
save()
return r
`)
