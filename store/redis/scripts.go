package redis

import goredis "github.com/redis/go-redis/v9"

// Script replies. Every script answers one integer; anything else is an
// unexpected reply.
const (
	replyOK            = 0
	replyExists        = 1 // create: the id is taken
	replyNoParent      = 2 // create: the parent does not exist
	replyNotFound      = 3 // update, append: the record does not exist
	replyVersionMoved  = 4 // update: another writer saved first
	replyFieldsMissing = 5 // update: the record hash lacks its version
)

// appendLua numbers the events in ARGV[from..] (pairs of event JSON and
// data, data "" for none) after the record's last seq and adds them to its
// stream, trimmed to about maxlen entries. The entry id 0-<seq> is the
// event's seq, so XRANGE pages by seq directly. The stream then gets the
// record's TTL, if it has one: a log created after the record finished
// must not outlive it.
const appendLua = `
local function append(rec, ev, maxlen, from)
  local n = (#ARGV - from + 1) / 2
  if n >= 1 then
    local seq = redis.call('HINCRBY', rec, 'seq', n) - n
    for i = from, #ARGV, 2 do
      seq = seq + 1
      local id = '0-' .. string.format('%d', seq)
      if ARGV[i + 1] == '' then
        redis.call('XADD', ev, 'MAXLEN', '~', maxlen, id, 'e', ARGV[i])
      else
        redis.call('XADD', ev, 'MAXLEN', '~', maxlen, id, 'e', ARGV[i], 'd', ARGV[i + 1])
      end
    end
  end
  local ttl = redis.call('PTTL', rec)
  if ttl > 0 then
    redis.call('PEXPIRE', ev, ttl)
  end
end
`

// createScript saves a new record, its first events, its entry in the
// created index and, for a child, the child's id in its parent's list, in
// one step.
//
// KEYS: rec, ev, parent rec (rec again for a root), created index, expires
// index. ARGV: record JSON, child id as a JSON string ("" for a root),
// index member, retention ms (0 for a live record), expiry time ms,
// maxlen, then the events.
var createScript = goredis.NewScript(appendLua + `
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 1
end
local child = ARGV[2]
if child ~= '' and redis.call('EXISTS', KEYS[3]) == 0 then
  return 2
end
redis.call('HSET', KEYS[1], 'json', ARGV[1], 'ver', 1, 'seq', 0)
if child ~= '' then
  local kids = redis.call('HGET', KEYS[3], 'kids')
  if kids then
    kids = string.sub(kids, 1, -2) .. ',' .. child .. ']'
  else
    kids = '[' .. child .. ']'
  end
  redis.call('HSET', KEYS[3], 'kids', kids)
  redis.call('HINCRBY', KEYS[3], 'ver', 1)
end
redis.call('ZADD', KEYS[4], 0, ARGV[3])
if tonumber(ARGV[4]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  redis.call('ZADD', KEYS[5], ARGV[5], ARGV[3])
end
append(KEYS[1], KEYS[2], ARGV[6], 7)
return 0
`)

// updateScript is the compare-and-set of Update: it saves the record only
// if its version is still the one the caller read, bumps the version and
// appends the events. A record that has just finished gets its TTL here.
//
// KEYS: rec, ev. ARGV: version read, record JSON, retention ms (0 unless
// this update finishes the record), maxlen, then the events.
var updateScript = goredis.NewScript(appendLua + `
local ver = redis.call('HGET', KEYS[1], 'ver')
if not ver then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return 3
  end
  return 5
end
if ver ~= ARGV[1] then
  return 4
end
redis.call('HSET', KEYS[1], 'json', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'ver', 1)
if tonumber(ARGV[3]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
append(KEYS[1], KEYS[2], ARGV[4], 5)
return 0
`)

// appendScript adds events to an existing record's log.
//
// KEYS: rec, ev. ARGV: maxlen, then the events.
var appendScript = goredis.NewScript(appendLua + `
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 3
end
append(KEYS[1], KEYS[2], ARGV[1], 2)
return 0
`)

// scripts are loaded at Open, so a server without scripting fails there.
var scripts = []*goredis.Script{createScript, updateScript, appendScript}
