package memory

import (
	"context"
	"sync"

	"gatekeeper/trajectory"
)

// signalBuffer is how many signals a subscriber may fall behind by before
// it loses some.
const signalBuffer = 256

// signals is the in-process fan-out of trajectory.Signals.
type signals struct {
	mu   sync.Mutex
	subs map[chan trajectory.Signal]struct{}
}

var _ trajectory.Signals = (*Store)(nil)

// Publish implements trajectory.Signals.
func (s *Store) Publish(ctx context.Context, sig trajectory.Signal) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.sig.mu.Lock()
	defer s.sig.mu.Unlock()
	for ch := range s.sig.subs {
		select {
		case ch <- sig:
		default: // a stalled subscriber loses the signal, never the publisher its time
		}
	}
	return nil
}

// Subscribe implements trajectory.Signals.
func (s *Store) Subscribe(ctx context.Context) (<-chan trajectory.Signal, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch := make(chan trajectory.Signal, signalBuffer)
	s.sig.mu.Lock()
	if s.sig.subs == nil {
		s.sig.subs = make(map[chan trajectory.Signal]struct{})
	}
	s.sig.subs[ch] = struct{}{}
	s.sig.mu.Unlock()
	go func() {
		<-ctx.Done()
		s.sig.mu.Lock()
		delete(s.sig.subs, ch)
		s.sig.mu.Unlock()
		close(ch)
	}()
	return ch, nil
}
