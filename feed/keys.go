package feed

import (
	"context"
	"encoding/json"
	"maps"
	"sync"
	"time"
)

// keysEvery is how often, at most, Keys publishes: headroom changes on
// every call, and the stream needs the level, not every step.
const keysEvery = time.Second

// Keys gathers the rate-limit scheduler's figures (each key's headroom,
// each class's queue length) and publishes them as keys events, at most
// once every second and only when something changed. Its methods are
// quick and never wait, as the scheduler requires of its observer.
type Keys struct {
	pub publisher
	now func() time.Time

	mu       sync.Mutex
	headroom map[string]float64
	queues   map[string]int
	changed  bool
}

// KeysSnapshot is a keys event's data, and what GET /admin/v1/keys
// answers: the figures this process saw last.
type KeysSnapshot struct {
	Headroom map[string]float64 `json:"headroom"` // "provider/keyname": share of the tightest limit left
	Queues   map[string]int     `json:"queues"`   // priority class: turns waiting
}

// NewKeys returns a Keys publishing to f.
func NewKeys(f *Feed, now func() time.Time) *Keys {
	if now == nil {
		now = time.Now
	}
	return &Keys{pub: f, now: now, headroom: map[string]float64{}, queues: map[string]int{}}
}

// QueueLength records how many turns of class wait.
func (k *Keys) QueueLength(class string, n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if old, ok := k.queues[class]; !ok || old != n {
		k.queues[class] = n
		k.changed = true
	}
}

// Headroom records the share left of a key's tightest limit.
func (k *Keys) Headroom(key string, fraction float64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if old, ok := k.headroom[key]; !ok || old != fraction {
		k.headroom[key] = fraction
		k.changed = true
	}
}

// Snapshot returns the latest figures.
func (k *Keys) Snapshot() KeysSnapshot {
	k.mu.Lock()
	defer k.mu.Unlock()
	return KeysSnapshot{Headroom: maps.Clone(k.headroom), Queues: maps.Clone(k.queues)}
}

// Run publishes the figures when they changed, every second, until ctx
// ends.
func (k *Keys) Run(ctx context.Context) {
	t := time.NewTicker(keysEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			k.flush()
		}
	}
}

// flush publishes the figures if they changed since the last flush.
func (k *Keys) flush() {
	k.mu.Lock()
	if !k.changed {
		k.mu.Unlock()
		return
	}
	k.changed = false
	snap := KeysSnapshot{Headroom: maps.Clone(k.headroom), Queues: maps.Clone(k.queues)}
	k.mu.Unlock()
	data, err := json.Marshal(snap)
	if err != nil {
		return // maps of strings to numbers always encode
	}
	k.pub.Publish(Event{Kind: KindKeys, At: k.now(), Data: data})
}
