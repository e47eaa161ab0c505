package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/redistest"
)

// chainScriptBefore is the chain script as it was before its Lua was
// made cheaper (its SHA1 is chainScriptBeforeSHA): the new one must store
// and answer exactly what it did.
const chainScriptBefore = `
local function xadd(ev, maxlen, seq, from, last)
  for i = from, last, 2 do
    seq = seq + 1
    local id = '0-' .. string.format('%d', seq)
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

local notafter = tonumber(ARGV[#ARGV])
if notafter > 0 then
  local t = redis.call('TIME')
  local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if nowms > notafter then
    return {6, nowms}
  end
end
local n = tonumber(ARGV[1])
local gens, vers, seqs = {}, {}, {}
local moved = false
for i = 1, n do
  local h = redis.call('HMGET', KEYS[2 * i - 1], 'ver', 'gen', 'seq')
  if not h[1] then
    if redis.call('EXISTS', KEYS[2 * i - 1]) == 0 then
      return {3, i}
    end
    return {5, i}
  end
  gens[i], vers[i], seqs[i] = h[2], tonumber(h[1]), tonumber(h[3]) or 0
  if (h[2] or '') .. ':' .. h[1] ~= ARGV[4 * i] then
    moved = true
  end
end
if moved then
  local out = {4}
  for i = 1, n do
    local h = redis.call('HMGET', KEYS[2 * i - 1], 'json', 'kids')
    out[4 * i - 2], out[4 * i - 1], out[4 * i], out[4 * i + 1] = gens[i], vers[i], h[1], h[2]
  end
  return out
end
-- Each record is saved in one HSET (its JSON, version and last event
-- seq, counted from what was read above, in this same step), its events
-- numbered after its last seq, and its log given the record's TTL.
local out = {0}
local from = 4 * n + 4
local maxlen = ARGV[2]
for i = 1, n do
  local rec, ev, js = KEYS[2 * i - 1], KEYS[2 * i], ARGV[4 * i + 1]
  local k = tonumber(ARGV[4 * i + 3])
  local fields = {}
  if js ~= '' then
    vers[i] = vers[i] + 1
    fields[1], fields[2], fields[3], fields[4] = 'json', js, 'ver', vers[i]
  end
  if k > 0 then
    fields[#fields + 1], fields[#fields + 2] = 'seq', seqs[i] + k
  end
  if #fields > 0 then
    redis.call('HSET', rec, unpack(fields))
  end
  xadd(ev, maxlen, seqs[i], from, from + 2 * k - 1)
  local ttl = ARGV[4 * i + 2]
  if ttl == '1' then
    redis.call('PEXPIRE', rec, ARGV[3])
    redis.call('PEXPIRE', ev, ARGV[3])
  elseif ttl == 'x' then
    redis.call('PERSIST', rec)
    redis.call('PERSIST', ev)
  elseif ttl ~= '0' then
    redis.call('PEXPIRE', rec, string.sub(ttl, 2))
    redis.call('PEXPIRE', ev, string.sub(ttl, 2))
  elseif js ~= '' or k > 0 then
    -- The record's TTL as it is: the log follows it.
    followTTL(rec, ev)
  end
  from = from + 2 * k
  out[i + 1] = vers[i]
end
return out
`

const chainScriptBeforeSHA = "b5243f2849eec82edd184b6ded89815a65ad7cc2"

// TestChainScriptSameAsBefore runs the chain script and the one it
// replaced on identical states, under two key prefixes, over random
// chains, and compares their replies, every field of every record, the
// logs' entries and stream ids, and the TTLs of both.
func TestChainScriptSameAsBefore(t *testing.T) {
	before := goredis.NewScript(chainScriptBefore)
	if before.Hash() != chainScriptBeforeSHA {
		t.Fatalf("the old script's text changed: sha %s", before.Hash())
	}
	if before.Hash() == chainScript.Hash() {
		t.Fatal("the chain script is the old one")
	}
	c := client(t, redistest.Start(t))
	ctx := context.Background()
	cases := 3000
	if testing.Short() {
		cases = 500
	}
	rng := rand.New(rand.NewPCG(1, 2))
	counts := map[string]int{}
	for i := range cases {
		cc := randomChainCase(rng)
		if err := c.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"a:", "b:"} {
			cc.setUp(t, ctx, c, p)
		}
		old, errOld := before.Run(ctx, c, cc.keys("a:"), cc.args...).Result()
		got, errNew := chainScript.Run(ctx, c, cc.keys("b:"), cc.args...).Result()
		where := fmt.Sprintf("case %d: %s", i, cc)
		if (errOld == nil) != (errNew == nil) {
			t.Fatalf("%s: errors: before %v, now %v", where, errOld, errNew)
		}
		if errOld != nil {
			counts["error"]++
			t.Logf("%s: both failed: %v / %v", where, errOld, errNew)
		} else {
			counts[fmt.Sprint(old.([]any)[0])]++
			sameReply(t, where, old, got)
		}
		sameState(t, ctx, c, where, cc)
	}
	t.Logf("replies by code: %v", counts)
	for _, code := range []string{"0", "3", "4", "5", "6"} {
		if counts[code] == 0 {
			t.Errorf("no case answered %s", code)
		}
	}
}

// chainRec is one record of a random chain case: its state before the
// script runs and what the script is asked to do with it.
type chainRec struct {
	exists    bool
	fields    map[string]string // the record hash (ver, gen, seq, json, kids)
	ttl       int64             // ms, 0 for none
	log       int               // entries already in its log, ids 0-1..
	logTTL    int64             // ms, 0 for none
	expect    string            // "gen:ver" as the caller saw it
	js        string            // new JSON, "" to leave it
	finishing any               // 0, 1, "x" or "i<ms>"
	events    [][2]string       // event JSON, data
}

// chainCase is a chain of one to three records and the script's
// arguments for it.
type chainCase struct {
	recs   []chainRec
	maxlen int
	args   []any
}

func (cc chainCase) String() string {
	var b strings.Builder
	for i, r := range cc.recs {
		fmt.Fprintf(&b, "[%d exists=%v fields=%v ttl=%d log=%d logTTL=%d expect=%q js=%d finishing=%v events=%d] ",
			i, r.exists, r.fields, r.ttl, r.log, r.logTTL, r.expect, len(r.js), r.finishing, len(r.events))
	}
	fmt.Fprintf(&b, "maxlen=%d notafter=%v", cc.maxlen, cc.args[len(cc.args)-1])
	return b.String()
}

func (cc chainCase) keys(prefix string) []string {
	var ks []string
	for i := range cc.recs {
		ks = append(ks, fmt.Sprintf("%srec:%d", prefix, i), fmt.Sprintf("%sev:%d", prefix, i))
	}
	return ks
}

func randomChainCase(rng *rand.Rand) chainCase {
	pick := func(p float64) bool { return rng.Float64() < p }
	num := func() string {
		switch rng.IntN(4) {
		case 0:
			return "0"
		case 1:
			return strconv.Itoa(1 + rng.IntN(9))
		case 2:
			return strconv.Itoa(rng.IntN(100000))
		default:
			return strconv.FormatInt(rng.Int64N(1e15), 10)
		}
	}
	cc := chainCase{maxlen: []int{1, 3, 100, 10000}[rng.IntN(4)]}
	n := 1 + rng.IntN(3)
	for range n {
		r := chainRec{exists: !pick(0.04), fields: map[string]string{}}
		if r.exists {
			ver := num()
			if ver == "0" {
				ver = "1"
			}
			if !pick(0.04) {
				r.fields["ver"] = ver
			}
			gen := ""
			if !pick(0.1) {
				gen = strconv.FormatUint(rng.Uint64(), 36)
				r.fields["gen"] = gen
			}
			seq := "0"
			if !pick(0.1) {
				seq = num()
				r.fields["seq"] = seq
			}
			r.fields["json"] = fmt.Sprintf(`{"v":%d}`, rng.IntN(1000))
			if pick(0.3) {
				r.fields["kids"] = `["r/a","r/b"]`
			}
			if pick(0.5) {
				r.ttl = 100000 + rng.Int64N(1e9)
			}
			s, _ := strconv.ParseInt(seq, 10, 64)
			r.log = rng.IntN(min(int(s), 150) + 1)
			if r.log > 0 && pick(0.5) {
				r.logTTL = 100000 + rng.Int64N(1e9)
			}
			r.expect = gen + ":" + ver
			if pick(0.1) {
				r.expect = gen + ":" + ver + "0"
			}
		}
		if pick(0.7) {
			r.js = fmt.Sprintf(`{"new":%d,"s":"%s"}`, rng.IntN(1000), strings.Repeat("x", rng.IntN(2000)))
		}
		switch rng.IntN(5) {
		case 0:
			r.finishing = 1
		case 1:
			r.finishing = "x"
		case 2:
			r.finishing = "i" + strconv.FormatInt(1000+rng.Int64N(1e8), 10)
		default:
			r.finishing = 0
		}
		for range rng.IntN(4) {
			d := ""
			if pick(0.5) {
				d = fmt.Sprintf(`{"d":%d}`, rng.IntN(100))
			}
			r.events = append(r.events, [2]string{fmt.Sprintf(`{"type":"t%d"}`, rng.IntN(100)), d})
		}
		cc.recs = append(cc.recs, r)
	}
	cc.args = []any{n, cc.maxlen, int64(604800000)}
	for _, r := range cc.recs {
		cc.args = append(cc.args, r.expect, r.js, r.finishing, len(r.events))
	}
	for _, r := range cc.recs {
		for _, e := range r.events {
			cc.args = append(cc.args, e[0], e[1])
		}
	}
	var notafter int64
	switch rng.IntN(6) {
	case 0:
		notafter = time.Now().Add(time.Hour).UnixMilli()
	case 1:
		notafter = time.Now().Add(-time.Hour).UnixMilli()
	}
	cc.args = append(cc.args, notafter)
	return cc
}

// setUp writes the case's records and logs under prefix.
func (cc chainCase) setUp(t *testing.T, ctx context.Context, c goredis.UniversalClient, prefix string) {
	t.Helper()
	ks := cc.keys(prefix)
	for i, r := range cc.recs {
		rec, ev := ks[2*i], ks[2*i+1]
		if !r.exists {
			continue
		}
		p := c.TxPipeline()
		p.HSet(ctx, rec, r.fields)
		if r.ttl > 0 {
			p.PExpire(ctx, rec, time.Duration(r.ttl)*time.Millisecond)
		}
		for j := 1; j <= r.log; j++ {
			p.XAdd(ctx, &goredis.XAddArgs{Stream: ev, ID: "0-" + strconv.Itoa(j), Values: []any{"e", "old"}})
		}
		if r.logTTL > 0 {
			p.PExpire(ctx, ev, time.Duration(r.logTTL)*time.Millisecond)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// sameReply compares two replies; a late update's Redis time may differ
// by the time between the two runs.
func sameReply(t *testing.T, where string, old, got any) {
	t.Helper()
	o, g := old.([]any), got.([]any)
	if len(o) == 2 && len(g) == 2 && o[0] == int64(replyTooLate) && g[0] == int64(replyTooLate) {
		d := g[1].(int64) - o[1].(int64)
		if d < 0 || d > 1000 {
			t.Fatalf("%s: late: before %v, now %v", where, old, got)
		}
		return
	}
	if !reflect.DeepEqual(old, got) {
		t.Fatalf("%s: reply: before %#v, now %#v", where, old, got)
	}
}

// sameState compares what both prefixes hold: the same keys, hashes,
// stream entries and stream metadata, and TTLs within a second.
func sameState(t *testing.T, ctx context.Context, c goredis.UniversalClient, where string, cc chainCase) {
	t.Helper()
	var names [2][]string
	for j, p := range []string{"a:", "b:"} {
		ks, err := c.Keys(ctx, p+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			names[j] = append(names[j], strings.TrimPrefix(k, p))
		}
		slices.Sort(names[j])
	}
	if !slices.Equal(names[0], names[1]) {
		t.Fatalf("%s: keys: before %v, now %v", where, names[0], names[1])
	}
	a, b := cc.keys("a:"), cc.keys("b:")
	for i := range a {
		if i%2 == 0 {
			ha, hb := c.HGetAll(ctx, a[i]).Val(), c.HGetAll(ctx, b[i]).Val()
			if !reflect.DeepEqual(ha, hb) {
				t.Fatalf("%s: record %d: before %v, now %v", where, i/2, ha, hb)
			}
		} else {
			xa, xb := c.XRange(ctx, a[i], "-", "+").Val(), c.XRange(ctx, b[i], "-", "+").Val()
			if !reflect.DeepEqual(xa, xb) {
				t.Fatalf("%s: log %d: before %v, now %v", where, i/2, xa, xb)
			}
			if len(xa) > 0 {
				ia, ib := c.XInfoStream(ctx, a[i]).Val(), c.XInfoStream(ctx, b[i]).Val()
				ia.RadixTreeKeys, ib.RadixTreeKeys, ia.RadixTreeNodes, ib.RadixTreeNodes = 0, 0, 0, 0
				if !reflect.DeepEqual(ia, ib) {
					t.Fatalf("%s: log %d: before %+v, now %+v", where, i/2, ia, ib)
				}
			}
		}
		ta, tb := c.PTTL(ctx, a[i]).Val(), c.PTTL(ctx, b[i]).Val()
		if ta < 0 || tb < 0 {
			if ta != tb {
				t.Fatalf("%s: %s: ttl before %v, now %v", where, a[i], ta, tb)
			}
		} else if d := ta - tb; d < -time.Second || d > time.Second {
			t.Fatalf("%s: %s: ttl before %v, now %v", where, a[i], ta, tb)
		}
	}
}
