package redis

import (
	"container/list"
	"strconv"
	"sync"

	"gatekeeper/trajectory"
)

// DefaultCacheEntries is how many records a Store remembers when Options
// leaves CacheEntries unset: enough for the live chains of a busy replica,
// a few megabytes at most.
const DefaultCacheEntries = 4096

// entry is a record as this process last saw it in Redis: what an update
// starts from without reading, and the version its save must still find
// there. An entry is never changed once made; a newer one replaces it.
type entry struct {
	// gen is set when the record is created, so that a record created
	// after an earlier one under the same id expired never matches the
	// earlier one's versions, whose count restarts.
	gen string
	ver int64
	// json is the hash's json field, so that a save can leave a record
	// that fn did not change untouched.
	json string
	// rec is json decoded, with its children. It is shared: callers get
	// clones.
	rec *trajectory.Record
}

// tag is what the update script compares with the record's gen and ver.
func (e *entry) tag() string { return e.gen + ":" + strconv.FormatInt(e.ver, 10) }

// cache remembers the records this process last read or wrote, the
// least recently used dropped first. What it holds is a guess that the
// update script verifies: a stale entry costs a round trip, never a lost
// write.
type cache struct {
	max int

	mu    sync.Mutex
	byID  map[string]*list.Element // of *entry
	order list.List                // most recently used first
}

func newCache(max int) *cache {
	if max <= 0 {
		max = DefaultCacheEntries
	}
	return &cache{max: max, byID: make(map[string]*list.Element)}
}

func (c *cache) get(id string) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[id]
	if !ok {
		return nil
	}
	c.order.MoveToFront(el)
	return el.Value.(*entry)
}

// put remembers e, unless an entry of the same record at a later version
// is already there: replies to concurrent calls can arrive out of order.
func (c *cache) put(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := e.rec.ID
	if el, ok := c.byID[id]; ok {
		if old := el.Value.(*entry); old.gen != e.gen || old.ver <= e.ver {
			el.Value = e
		}
		c.order.MoveToFront(el)
		return
	}
	c.byID[id] = c.order.PushFront(e)
	if c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byID, last.Value.(*entry).rec.ID)
	}
}

// drop forgets what the cache holds for ids.
func (c *cache) drop(ids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if el, ok := c.byID[id]; ok {
			c.order.Remove(el)
			delete(c.byID, id)
		}
	}
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
