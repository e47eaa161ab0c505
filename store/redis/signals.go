package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/trajectory"
)

// signalChannel is the pub/sub channel every replica publishes signals on
// and listens to. On a cluster it is a shard channel (SPUBLISH and
// SSUBSCRIBE, Redis 7): its messages stay on the nodes serving its slot
// instead of being broadcast over the whole cluster bus.
const signalChannel = "gk:signals"

// signalBuffer is how many signals a subscriber may fall behind by before
// it loses some, as in the memory store.
const signalBuffer = 256

// subscribeTimeout bounds the wait for Redis to confirm a subscription,
// so that a server that accepts connections and never answers cannot hold
// Subscribe forever when the caller's context has no deadline.
const subscribeTimeout = 5 * time.Second

var _ trajectory.Signals = (*Store)(nil)

// SignalStats counts what this Store's subscriptions did with the signals
// Redis delivered to them, since Open.
type SignalStats struct {
	// Delivered went into a subscriber's channel.
	Delivered uint64
	// Dropped found a subscriber's channel full and was lost.
	Dropped uint64
	// Malformed could not be read as a signal and was ignored.
	Malformed uint64
}

// signalCounts backs SignalStats.
type signalCounts struct {
	delivered, dropped, malformed atomic.Uint64
}

// SignalStats returns the counts of every subscription of this Store.
func (s *Store) SignalStats() SignalStats {
	return SignalStats{
		Delivered: s.sigCounts.delivered.Load(),
		Dropped:   s.sigCounts.dropped.Load(),
		Malformed: s.sigCounts.malformed.Load(),
	}
}

// Publish implements trajectory.Signals with one PUBLISH (SPUBLISH on a
// cluster). Redis hands the message to the subscribers connected at that
// moment, this process's included; a replica that is reconnecting misses
// it.
func (s *Store) Publish(ctx context.Context, sig trajectory.Signal) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	b, err := encodeSignal(sig)
	if err != nil {
		return err
	}
	publish := s.rdb.Publish
	if s.cluster {
		publish = s.rdb.SPublish
	}
	if err := publish(ctx, signalChannel, b).Err(); err != nil {
		return s.fail(ctx, "publish signal", err)
	}
	return nil
}

// Subscribe implements trajectory.Signals. It returns once Redis has
// confirmed the subscription, so a Publish from any replica after it
// returns reaches the channel. The subscription holds a connection of its
// own until ctx ends or the Store is closed; then its channel is closed.
//
// go-redis pings an idle subscription every few seconds, and on a broken
// connection it dials again and subscribes again by itself: the channel
// stays open, and the signals published in between are lost, which the
// port allows.
func (s *Store) Subscribe(ctx context.Context) (<-chan trajectory.Signal, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	subscribe, kind := s.rdb.Subscribe, "subscribe"
	if s.cluster {
		subscribe, kind = s.rdb.SSubscribe, "ssubscribe"
	}
	ps := subscribe(ctx, signalChannel)
	if !s.subs.add(ps) {
		_ = ps.Close()
		return nil, trajectory.ErrClosed
	}
	// Closing the PubSub is what ends its blocking read, whether the
	// caller leaves during the confirmation or long after.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	if err := confirm(ctx, ps, kind); err != nil {
		stop()
		s.subs.remove(ps)
		_ = ps.Close()
		if errors.Is(err, errReply) {
			return nil, err
		}
		return nil, s.fail(ctx, "subscribe to "+signalChannel, err)
	}
	msgs := ps.Channel()
	out := make(chan trajectory.Signal, signalBuffer)
	go func() {
		defer close(out)
		defer s.subs.remove(ps)
		defer stop()
		for m := range msgs {
			s.forward(out, m.Payload)
		}
	}()
	return out, nil
}

// forward hands one payload to a subscriber without ever waiting on it:
// the goroutine that reads the connection waits on this one, and a
// subscriber that stalls must lose signals, not stall Redis's delivery to
// it until the server drops the connection as a slow client.
func (s *Store) forward(out chan<- trajectory.Signal, payload string) {
	sig, ok := decodeSignal(payload)
	if !ok {
		s.sigCounts.malformed.Add(1)
		return
	}
	// Counted before the send, so a reader that has the signal also sees
	// it counted; a full channel takes the count back.
	s.sigCounts.delivered.Add(1)
	select {
	case out <- sig:
	default:
		s.sigCounts.delivered.Add(^uint64(0))
		s.sigCounts.dropped.Add(1)
	}
}

// confirm reads the reply to SUBSCRIBE. Until it arrives Redis may not
// have registered the subscription, and a signal published meanwhile
// would not reach it.
func confirm(ctx context.Context, ps *goredis.PubSub, kind string) error {
	reply, err := ps.ReceiveTimeout(ctx, subscribeTimeout)
	if err != nil {
		return err
	}
	sub, ok := reply.(*goredis.Subscription)
	if !ok || sub.Kind != kind || sub.Channel != signalChannel {
		return fmt.Errorf("%w: subscribe to %s: answered %v", errReply, signalChannel, reply)
	}
	return nil
}

func encodeSignal(sig trajectory.Signal) (string, error) {
	b, err := json.Marshal(sig)
	if err != nil {
		return "", fmt.Errorf("redis store: encoding signal for %q: %w", sig.ID, err)
	}
	return string(b), nil
}

// decodeSignal reads a message of the signal channel. Anyone with access to
// Redis can publish there, so a payload that is not a signal naming a
// record and a request is ignored. An unknown kind is kept: a newer
// replica may send kinds this one does not act on.
func decodeSignal(payload string) (trajectory.Signal, bool) {
	var sig trajectory.Signal
	if err := json.Unmarshal([]byte(payload), &sig); err != nil {
		return trajectory.Signal{}, false
	}
	if sig.ID == "" || sig.Kind == "" {
		return trajectory.Signal{}, false
	}
	return sig, true
}

// pubsubs is the Store's live subscriptions, so that Close can end them:
// a PubSub on a client the caller owns would otherwise outlive the Store.
type pubsubs struct {
	mu     sync.Mutex
	closed bool
	live   map[*goredis.PubSub]struct{}
}

// add registers ps, or reports false once the Store is closed.
func (p *pubsubs) add(ps *goredis.PubSub) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if p.live == nil {
		p.live = make(map[*goredis.PubSub]struct{})
	}
	p.live[ps] = struct{}{}
	return true
}

func (p *pubsubs) remove(ps *goredis.PubSub) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.live, ps)
}

// closeAll closes every live subscription and refuses new ones. Each
// subscription's goroutine then closes its channel and returns.
func (p *pubsubs) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for ps := range p.live {
		_ = ps.Close()
	}
}
