package ratelimit

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"
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
//
// The scripts run on every turn, so they are written for Redis's CPU:
// each dimension's state is in locals (lim1, tat1, ...), its code written
// once and repeated for d = 1, 2, 3 by perDim, rather than in tables,
// loops and closures, which a script would build on every call; and a TAT
// is formatted with %d, which prints a whole number as %.0f does, at a
// fraction of its cost.
var gcraLua = `
local t = redis.call('TIME')
local base = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = 0
local key = KEYS[1]
local st = redis.call('HMGET', key, 't1', 't2', 't3', 'c')
local floor, tonumber = math.floor, tonumber

-- readTat is a stored TAT after base: its whole microseconds, exact, and
-- then its fraction; now when absent or unreadable.
local function readTat(v)
  if not v then return now end
  local whole, frac = string.match(v, '^(%d+)(%.?%d*)$')
  if not whole then return now end
  local x = tonumber(whole) - base
  if #frac > 1 then x = x + tonumber(frac) end
  return x
end

-- writeTat is x (after base) as stored: whole microseconds of the clock,
-- and the fraction when there is one.
local function writeTat(x)
  local whole = floor(x)
  local f = floor((x - whole) * 1e12 + 0.5)
  if f >= 1e12 then whole, f = whole + 1, 0 end
  local w = base + whole
  -- From 1e9 to 2^53, with %d, in parts below 2^31: some servers' Lua
  -- formats a %d from a C long of 32 bits. (w / 1e9 is rounded by less
  -- than 1e-9, so floor finds its whole part.)
  local hi = floor(w / 1e9)
  if hi >= 1 and hi < 9007199 then
    local lo = w - hi * 1e9
    if f > 0 then
      local fhi = floor(f / 1e6)
      return string.format('%d%09d.%06d%06d', hi, lo, fhi, f - fhi * 1e6)
    end
    return string.format('%d%09d', hi, lo)
  end
  local s = string.format('%.0f', w)
  if f > 0 then s = s .. string.format('.%012.0f', f) end
  return s
end

-- Dimension d's limit limd and burst burstd; tau the burst and iv one
-- unit, in µs; tatd its TAT, never before now.
` + perDim(`
local lim$d, burst$d, tau$d, iv$d, tat$d = tonumber(ARGV[$d]), 0, 0, 0, now
if lim$d > 0 then
  burst$d = tonumber(ARGV[3 + $d])
  tau$d = burst$d * 60000000 / lim$d
  iv$d = 60000000 / lim$d
  tat$d = readTat(st[$d])
  if tat$d < now then tat$d = now end
end
`, 0) + `
local advisory = ARGV[7] == '1'
local cool = (tonumber(st[4]) or 0) - base
`

// perDim is s once for each dimension d = 1, 2, 3, with $d replaced by d
// and $o by o, a script's offset in ARGV of the arguments s reads
// (ARGV[$o + $d], which Lua folds to one constant).
func perDim(s string, o int) string {
	var b strings.Builder
	for _, d := range []string{"1", "2", "3"} {
		b.WriteString(strings.NewReplacer("$d", d, "$o", strconv.Itoa(o)).Replace(s))
	}
	return b.String()
}

// capDebtLua keeps an advisory key's debt in dimension $d (below empty)
// within a minute; for perDim.
const capDebtLua = `
  if advisory then
    local limit = now + tau$d + 60000000
    if tat$d > limit then tat$d = limit end
  end
`

// headroomLua sets h to the headroom in millionths of a key that is not
// cooled: its tightest limited dimension.
var headroomLua = `
local h = 1
` + perDim(`
if lim$d > 0 then
  local f = 1 - (tat$d - now) / tau$d
  if f < h then h = f end
end
`, 0) + `
if h < 0 then h = 0 end
h = floor(h * 1000000)
`

// saveLua writes the TATs and the cooling, and keeps the hash until they
// have passed (at least two minutes).
// One HSET of every field, rather than one each: fewer calls into the
// server per script.
var saveLua = `
local horizon = cool - now
local fields, nf = {}, 0
` + perDim(`
if lim$d > 0 then
  fields[nf + 1], fields[nf + 2], nf = 't$d', writeTat(tat$d), nf + 2
  if tat$d - now > horizon then horizon = tat$d - now end
end
`, 0) + `
if cool > now then
  fields[nf + 1], fields[nf + 2], nf = 'c', string.format('%.0f', base + cool), nf + 2
end
if nf > 0 then redis.call('HSET', key, unpack(fields, 1, nf)) end
local ttl = math.ceil(horizon / 1000) + 1000
if ttl < 120000 then ttl = 120000 end
redis.call('PEXPIRE', key, ttl)
`

// takeLua(o) sets r to the reply of a take of ARGV[o+1..o+3] (requests,
// input, output), which admits them if every limited dimension has room
// for them, a cost above the burst needing a full bucket, moving the
// TATs, and answers {1, 0, headroom}; or answers {0, wait ms, headroom},
// taking nothing. An advisory key admits at once. The caller saves.
func takeLua(o int) string {
	return `
local r
if cool > now then
  r = {0, math.ceil((cool - now) / 1000), 0}
else
  local wait = 0
` + perDim(`
  local n$d = 0
  if lim$d > 0 then n$d = tonumber(ARGV[$o + $d]) end
  if n$d > 0 and not advisory then
    local need = n$d
    if need > burst$d then need = burst$d end
    local w = (tat$d - now) - (tau$d - need * iv$d)
    if w > wait then wait = w end
  end
`, o) + `
  local ok, ms = 0, 0
  if wait > 0 then
    ms = math.ceil(wait / 1000)
  else
    ok = 1
` + perDim(`
    if n$d > 0 then
      tat$d = tat$d + n$d * iv$d
`+capDebtLua+`
    end
`, o) + `
  end
` + headroomLua + `
  r = {ok, ms, h}
end
`
}

// takeScript takes ARGV[8..10] and answers take's reply.
var takeScript = newScript(gcraLua + takeLua(7) + `
if r[1] == 1 then
` + saveLua + `
end
return r
`)

// takeBatchScript takes the ARGV[8] costs that follow it (requests,
// input and output of each, from ARGV[9]) in order, each as takeLua takes
// one, until one has no room, and answers {costs taken, wait ms until
// the next would fit (0 when all were), headroom}: the turns waiting in
// a scheduler's queue, admitted in one call instead of one round trip
// each. A cooled key takes none.
var takeBatchScript = newScript(gcraLua + `
if cool > now then
  return {0, math.ceil((cool - now) / 1000), 0}
end
local count, took, wait = tonumber(ARGV[8]), 0, 0
for i = 0, count - 1 do
  local o = 8 + 3 * i
` + perDim(`
  local n$d = 0
  if lim$d > 0 then n$d = tonumber(ARGV[o + $d]) end
  if n$d > 0 and not advisory then
    local need = n$d
    if need > burst$d then need = burst$d end
    local w = (tat$d - now) - (tau$d - need * iv$d)
    if w > wait then wait = w end
  end
`, 0) + `
  if wait > 0 then break end
` + perDim(`
  if n$d > 0 then
    tat$d = tat$d + n$d * iv$d
`+capDebtLua+`
  end
`, 0) + `
  took = took + 1
end
` + headroomLua + `
if took > 0 then
` + saveLua + `
end
return {took, math.ceil(wait / 1000), h}
`)

// adjustLua(o) moves each TAT by ARGV[o+1..o+3] units: forward takes,
// back gives capacity back, never past now (a full bucket). An argument
// "0", the most common, is not read into a number.
func adjustLua(o int) string {
	return perDim(`
if lim$d > 0 and ARGV[$o + $d] ~= '0' then
  local n = tonumber(ARGV[$o + $d])
  if n ~= 0 then
    tat$d = tat$d + n * iv$d
    if tat$d < now then tat$d = now end
`+capDebtLua+`
  end
end
`, o)
}

// syncLua(o) lowers what is left in each dimension to ARGV[o+1..o+3]
// (< 0: not reported) and, where that is 0 or not reported, to what a
// bucket full only in ARGV[o+4..o+6] µs (< 0: not reported) holds, by
// moving its TAT forward, never back. An argument "-1", the most
// common, is not read into a number.
func syncLua(o int) string {
	return perDim(`
if lim$d > 0 then
  local left = ARGV[$o + $d]
  left = left == '-1' and -1 or tonumber(left)
  if left >= 0 then
    local f = now + tau$d - left * iv$d
    if f > tat$d then tat$d = f end
  end
  local reset = ARGV[$o + 3 + $d]
  reset = reset == '-1' and -1 or tonumber(reset)
  if reset >= 0 and left <= 0 then
    local f = now + reset
    if f > tat$d then tat$d = f end
  end
end
`, o)
}

// headroomScript answers the key's headroom in millionths, 0 when cooled.
var headroomScript = newScript(gcraLua + `
if cool > now then return 0 end
` + headroomLua + `
return h
`)

// coolScript cools the key until now + ARGV[8] ms, unless it is cooled
// longer already. Answers 0.
var coolScript = newScript(gcraLua + `
local untl = now + tonumber(ARGV[8]) * 1000
if untl > cool then cool = untl end
` + saveLua + `
return 0
`)

// settleScript adjusts by ARGV[8..10] and then syncs to ARGV[11..16], in
// one round trip. Answers 0.
var settleScript = newScript(gcraLua + adjustLua(7) + syncLua(10) + saveLua + `
return 0
`)

// settleTakeScript is settleScript's settle (ARGV[8..16]) and then
// takeScript's take (ARGV[17..19]) on one key, in one call: a turn's take
// carrying the settle of the turn before it on the same key (see Fuse),
// which the take then sees. The settle is saved whatever the take
// answers; the reply is the take's.
var settleTakeScript = newScript(gcraLua + adjustLua(7) + syncLua(10) + takeLua(16) + saveLua + `
return r
`)

// sliceLua(o) follows a take (r): when it admitted the turn, it also
// takes ARGV[o+1..o+3] (a replica's slice, see slices.go) if every
// limited dimension keeps at least half of its burst free after them,
// and answers the headroom after that; r[4] is 1 when it took some, else
// 0. An advisory key is never asked for a slice.
func sliceLua(o int) string {
	return `
r[4] = 0
if r[1] == 1 then
  local fits, asked = true, false
` + perDim(`
  local s$d = 0
  if lim$d > 0 and ARGV[$o + $d] ~= '0' then
    s$d = tonumber(ARGV[$o + $d])
    if s$d > 0 then asked = true end
    if (tat$d - now) + s$d * iv$d > tau$d / 2 then fits = false end
  end
`, o) + `
  if fits and asked then
` + perDim(`
    if s$d > 0 then tat$d = tat$d + s$d * iv$d end
`, o) + headroomLua + `
    r[3], r[4] = h, 1
  end
end
`
}

// sliceTakeScript is settleTakeScript (ARGV[8..19]) with a slice asked
// for after the take (ARGV[20..22]): a turn's take asking for a slice,
// and giving back what was left of the one before. The reply is the
// take's, and whether the slice was taken.
var sliceTakeScript = newScript(gcraLua + adjustLua(7) + syncLua(10) + takeLua(16) + sliceLua(19) + saveLua + `
return r
`)
