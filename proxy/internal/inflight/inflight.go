package inflight

import (
	"sync"

	"gatekeeper/trajectory"
)

// Call is a call in flight as the registry sees it: comparable, so that
// a call removes only itself.
type Call interface {
	comparable
	// Record is the thread record the call runs on.
	Record() string
	// Control stops the call for an operator's cancel or kill.
	Control(kind trajectory.ControlKind)
}

// Registry tracks the calls in flight and the waiters, by record id.
type Registry[C Call] struct {
	mu      sync.Mutex
	calls   map[string]C
	waiters map[string]map[chan struct{}]struct{}
}

// New returns an empty registry.
func New[C Call]() *Registry[C] {
	return &Registry[C]{calls: make(map[string]C), waiters: make(map[string]map[chan struct{}]struct{})}
}

// Add registers c as its record's call in flight.
func (l *Registry[C]) Add(c C) {
	l.mu.Lock()
	l.calls[c.Record()] = c
	l.mu.Unlock()
}

// Remove forgets c, unless another call of its record took its place.
func (l *Registry[C]) Remove(c C) {
	l.mu.Lock()
	if l.calls[c.Record()] == c {
		delete(l.calls, c.Record())
	}
	l.mu.Unlock()
}

// All returns the calls in flight.
func (l *Registry[C]) All() []C {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]C, 0, len(l.calls))
	for _, c := range l.calls {
		out = append(out, c)
	}
	return out
}

// Wait returns a channel closed by the next signal for id, and a func to
// stop waiting.
func (l *Registry[C]) Wait(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	l.mu.Lock()
	if l.waiters[id] == nil {
		l.waiters[id] = make(map[chan struct{}]struct{})
	}
	l.waiters[id][ch] = struct{}{}
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		if _, ok := l.waiters[id][ch]; ok {
			delete(l.waiters[id], ch)
			if len(l.waiters[id]) == 0 {
				delete(l.waiters, id)
			}
		}
		l.mu.Unlock()
	}
}

// Signal acts on a control signal for record sig.ID: its call in flight
// is told (cancel, kill) and the requests waiting on it look again.
func (l *Registry[C]) Signal(sig trajectory.Signal) {
	l.mu.Lock()
	c, ok := l.calls[sig.ID]
	for ch := range l.waiters[sig.ID] {
		close(ch)
	}
	delete(l.waiters, sig.ID)
	l.mu.Unlock()
	if ok {
		c.Control(sig.Kind)
	}
}
