package admit

import "sync"

// Hint is where an earlier call of a thread was admitted.
type Hint struct {
	Parent, Base string
	Shared       bool // Base is a last child shared by threads past limits.max_children
}

// Hints remembers, per trajectory and thread key, the record a thread was
// admitted on, so that a thread's later calls are admitted in one store
// call. A hint is only a guess: admission on it re-checks everything.
type Hints struct {
	mu  sync.Mutex
	m   map[string]Hint
	max int
}

// NewHints remembers at most max threads.
func NewHints(max int) *Hints { return &Hints{m: make(map[string]Hint), max: max} }

// Get is the hint for k.
func (h *Hints) Get(k string) (Hint, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[k]
	return v, ok
}

// Put remembers v for k.
func (h *Hints) Put(k string, v Hint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.m) >= h.max {
		// Bounded: forgetting costs each thread one slower admission.
		clear(h.m)
	}
	h.m[k] = v
}

// Drop forgets the hint for k.
func (h *Hints) Drop(k string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, k)
}
