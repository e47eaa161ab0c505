package redis

import goredis "github.com/redis/go-redis/v9"

// Script replies. appendScript answers one of these integers; createScript
// and chainScript answer an array that starts with one. Anything else is
// an unexpected reply.
const (
	replyOK            = 0
	replyExists        = 1 // create: the id is taken
	replyNoParent      = 2 // create: the parent does not exist
	replyNotFound      = 3 // chain, append: a record does not exist
	replyVersionMoved  = 4 // chain: another writer saved first
	replyFieldsMissing = 5 // chain: a record hash lacks its version
	replyTooLate       = 6 // chain: its sender had stopped waiting
	replyChildrenFull  = 7 // create: the parent has its limit of children
)

// logLua defines what writes a record's event log. xadd numbers the
// events in ARGV[from..last] (pairs of event JSON and data, data "" for
// none) after seq and adds them to the stream ev, trimmed to about maxlen
// entries; the entry id 0-<seq> is the event's seq, so XRANGE pages by
// seq directly. followTTL gives ev the record's TTL, if it has one, and
// none if the record has none: a log must not outlive its record, nor
// expire before it.
const logLua = `
local function xadd(ev, maxlen, seq, from, last)
  for i = from, last, 2 do
    seq = seq + 1
    local id = string.format('0-%d', seq)
    if ARGV[i + 1] == '' then
      redis.call('XADD', ev, 'MAXLEN', '~', maxlen, id, 'e', ARGV[i])
    else
      redis.call('XADD', ev, 'MAXLEN', '~', maxlen, id, 'e', ARGV[i], 'd', ARGV[i + 1])
    end
  end
end
local function followTTL(rec, ev)
  local ttl = redis.call('PTTL', rec)
  if ttl > 0 then
    redis.call('PEXPIRE', ev, ttl)
  elseif ttl == -1 then
    redis.call('PERSIST', ev)
  end
end
`

// appendLua defines append, which adds the events in ARGV[from..last]
// to the record's log after its last seq (bumping it) and gives the log
// the record's TTL (logLua).
const appendLua = logLua + `
local function append(rec, ev, maxlen, from, last)
  local n = (last - from + 1) / 2
  if n >= 1 then
    xadd(ev, maxlen, redis.call('HINCRBY', rec, 'seq', n) - n, from, last)
  end
  followTTL(rec, ev)
end
`

// createScript saves a new record, its first events, its entry in the
// created index and, for a child, the child's id in its parent's list, in
// one step. It answers {0} for a root and {0, parent gen, parent ver} for
// a child, so the caller can keep its copy of the parent current; {7,
// the parent's last child} when the parent already has the most children
// it may have (the bound is checked in the step that adds the child).
//
// KEYS: rec, ev, parent rec (rec again for a root), created index, expires
// index. ARGV: record JSON, child id as a JSON string ("" for a root),
// index member, TTL ms (the retention for a finished record, the idle
// retention for an idle one, 0 for none), expiry time ms,
// maxlen, gen, the most children the parent may have (0: no bound), then
// the events.
var createScript = goredis.NewScript(appendLua + `
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {1}
end
local child = ARGV[2]
if child ~= '' and redis.call('EXISTS', KEYS[3]) == 0 then
  return {2}
end
local kids = false
if child ~= '' then
  kids = redis.call('HGET', KEYS[3], 'kids')
  local most = tonumber(ARGV[8])
  if most > 0 and kids then
    local ids = cjson.decode(kids)
    if #ids >= most then
      return {7, ids[#ids]}
    end
  end
end
redis.call('HSET', KEYS[1], 'json', ARGV[1], 'ver', 1, 'seq', 0, 'gen', ARGV[7])
local out = {0}
if child ~= '' then
  if kids then
    kids = string.sub(kids, 1, -2) .. ',' .. child .. ']'
  else
    kids = '[' .. child .. ']'
  end
  redis.call('HSET', KEYS[3], 'kids', kids)
  local ver = redis.call('HINCRBY', KEYS[3], 'ver', 1)
  out = {0, redis.call('HGET', KEYS[3], 'gen'), ver}
end
redis.call('ZADD', KEYS[4], 0, ARGV[3])
if tonumber(ARGV[4]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  redis.call('ZADD', KEYS[5], ARGV[5], ARGV[3])
end
append(KEYS[1], KEYS[2], ARGV[6], 9, #ARGV)
return out
`)

// chainScript is the compare-and-set of Update and UpdateChain. It checks
// that every record still has the gen and version the caller started
// from; if one moved, it writes nothing and answers what every record
// holds now, so that the caller's next attempt needs no read:
// {4, then gen, ver, json, kids per record}. Otherwise it saves each
// changed record, bumping its version (a record that has just finished
// gets its TTL here, an idle one its idle TTL, a busy one none), appends
// each record's events to its own log and answers {0, then each record's
// version}.
//
// An update Redis reads after its sender stopped waiting for the answer
// (Redis was stopped, or its queue was long) is refused with {6, Redis's
// time in ms}: the sender has already failed the call, and a reservation
// saved now would be a call nobody makes.
//
// KEYS: rec and ev of each record, nearest first. ARGV: record count,
// maxlen, retention ms, then four per record: expected "gen:ver", new
// JSON ("" to leave the record as it is), its TTL, set on every record
// of the chain, changed or not (1: this save finishes it, the retention;
// "i<ms>": the chain is idle, ms; "x": none; 0: as it is) and
// its event count; then every record's events, in chain order; last,
// the time in Redis's clock, in ms, past which nobody waits for the
// answer (0: no limit).
//
// It runs on nearly every turn, so its Lua is kept cheap for Redis: state
// in locals rather than tables (one table of reads, for a chain of more
// than one record), arguments compared with their common literals before
// any conversion, arithmetic rather than tonumber (one string conversion
// instead of two), and one HSET spelled out per case rather than a table
// unpacked. chain_script_test.go pins that it stores and answers exactly
// what its earlier, plainer text did.
var chainScript = goredis.NewScript(logLua + `
local notafter = ARGV[#ARGV]
if notafter ~= '0' then
  notafter = notafter + 0
  if notafter > 0 then
    local t = redis.call('TIME')
    local us = t[2] + 0
    local nowms = t[1] * 1000 + (us - us % 1000) / 1000
    if nowms > notafter then
      return {6, nowms}
    end
  end
end
local n = ARGV[1]
if n == '1' then n = 1 else n = n + 0 end
-- h is the record's {ver, gen, seq}; a chain of more than one record
-- keeps them all in hs.
local h, hs
if n > 1 then hs = {} end
local moved = false
for i = 1, n do
  h = redis.call('HMGET', KEYS[2 * i - 1], 'ver', 'gen', 'seq')
  if not h[1] then
    if redis.call('EXISTS', KEYS[2 * i - 1]) == 0 then
      return {3, i}
    end
    return {5, i}
  end
  if (h[2] or '') .. ':' .. h[1] ~= ARGV[4 * i] then
    moved = true
  end
  if hs then hs[i] = h end
end
if moved then
  local out = {4}
  for i = 1, n do
    if hs then h = hs[i] end
    local r = redis.call('HMGET', KEYS[2 * i - 1], 'json', 'kids')
    out[4 * i - 2], out[4 * i - 1], out[4 * i], out[4 * i + 1] = h[2], h[1] + 0, r[1], r[2]
  end
  return out
end
-- Each record is saved in one HSET (its JSON, version and last event
-- seq, counted from what was read above, in this same step), its events
-- numbered after its last seq, and its log given the record's TTL. The
-- version and seq are sent as strings formatted with '%d', the bytes
-- Redis's '%.17g' makes of these numbers, at less cost: they are counters
-- far below 2^31, which the C long behind Lua's %d holds on every
-- platform.
local out
if hs then out = {0} end
local from = 4 * n + 4
local maxlen = ARGV[2]
local ver
for i = 1, n do
  if hs then h = hs[i] end
  local rec, ev, js, k = KEYS[2 * i - 1], KEYS[2 * i], ARGV[4 * i + 1], ARGV[4 * i + 3]
  if k == '0' then k = 0 elseif k == '1' then k = 1 else k = k + 0 end
  local seq
  if k > 0 then
    seq = (h[3] or 0) + 0
  end
  if js ~= '' then
    ver = h[1] + 1
    if k > 0 then
      redis.call('HSET', rec, 'json', js, 'ver', string.format('%d', ver), 'seq', string.format('%d', seq + k))
    else
      redis.call('HSET', rec, 'json', js, 'ver', string.format('%d', ver))
    end
  else
    ver = h[1] + 0
    if k > 0 then
      redis.call('HSET', rec, 'seq', string.format('%d', seq + k))
    end
  end
  if k > 0 then
    xadd(ev, maxlen, seq, from, from + 2 * k - 1)
  end
  local ttl = ARGV[4 * i + 2]
  if ttl == '0' then
    if js ~= '' or k > 0 then
      -- The record's TTL as it is: the log follows it.
      followTTL(rec, ev)
    end
  elseif ttl == '1' then
    redis.call('PEXPIRE', rec, ARGV[3])
    redis.call('PEXPIRE', ev, ARGV[3])
  elseif ttl == 'x' then
    redis.call('PERSIST', rec)
    redis.call('PERSIST', ev)
  else
    local ms = string.sub(ttl, 2)
    redis.call('PEXPIRE', rec, ms)
    redis.call('PEXPIRE', ev, ms)
  end
  from = from + 2 * k
  if out then out[i + 1] = ver end
end
if out then return out end
return {0, ver}
`)

// appendScript adds events to an existing record's log.
//
// KEYS: rec, ev. ARGV: maxlen, then the events.
var appendScript = goredis.NewScript(appendLua + `
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 3
end
append(KEYS[1], KEYS[2], ARGV[1], 2, #ARGV)
return 0
`)

// scripts are loaded at Open, so a server without scripting fails there.
var scripts = []*goredis.Script{createScript, chainScript, appendScript, pruneCallingScript}

// noScript reports the server's answer that it does not have a script (it
// lost its script cache): run the script again by its text. A nil error
// is checked first, as it is on nearly every call: HasErrorPrefix
// allocates.
func noScript(err error) bool {
	return err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT")
}
