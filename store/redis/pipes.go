package redis

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// sharedPipes sends the commands of concurrent callers in shared
// pipelines. While one pipeline is out, the commands that arrive wait and
// go together in the next: one write and one read, here and in Redis, for
// every update sent at once, where each would otherwise make its own round
// trip, each a pair of system calls on both sides. Alone, a caller's
// commands leave at once, sent by the caller itself; under load they wait
// at most for the pipeline ahead of them.
//
// A caller's commands are built before they are handed over, and their
// replies are in them once exec returns nil. exec returns the context's
// error only when its commands were never sent (each then has it as its
// own error); once taken into a pipeline they are waited for, as a
// pipeline of the caller's own would be, until the pipeline ends (by the
// latest deadline of those in it, else the client's read timeout).
type sharedPipes struct {
	rdb rediser

	mu      sync.Mutex
	queue   []*order
	sending bool // a sender runs; it takes the queue until it is empty
}

// order is one caller's commands, queued.
type order struct {
	ctx   context.Context
	cmds  []goredis.Cmder
	state atomic.Int32 // orderWaiting, then orderTaken or orderLeft
	done  chan struct{}
}

const (
	orderWaiting = iota
	orderTaken   // in a pipeline: its caller waits for its replies
	orderLeft    // its caller's context ended first: never sent
)

// maxOrders bounds the orders of one pipeline; the rest go in the next.
const maxOrders = 512

// exec sends cmds in a shared pipeline and returns once their replies are
// in them, each command's error its own; or, when ctx ends before they
// were sent, ctx's error.
func (p *sharedPipes) exec(ctx context.Context, cmds []goredis.Cmder) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o := &order{ctx: ctx, cmds: cmds, done: make(chan struct{})}
	p.mu.Lock()
	if !p.sending {
		// Nothing is out: the caller sends its own pipeline, as it would
		// without sharing (no hand-over to another goroutine, which a
		// caller alone would pay for in latency), and leaves those that
		// queue meanwhile to a sender.
		p.sending = true
		p.mu.Unlock()
		p.sendOne([]*order{o})
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.sending = false
		} else {
			go p.send()
		}
		p.mu.Unlock()
		if o.state.Load() != orderTaken {
			return unsent(ctx, cmds) // it ended before the send
		}
		return nil
	}
	p.queue = append(p.queue, o)
	p.mu.Unlock()
	select {
	case <-o.done:
		return nil
	case <-ctx.Done():
		if o.state.CompareAndSwap(orderWaiting, orderLeft) {
			return unsent(ctx, cmds)
		}
		<-o.done
		return nil
	}
}

// unsent gives cmds, which never left, ctx's error, as a pipeline run on
// an ended context gives its commands: a caller that reads a command
// without looking at exec's error (one riding with an update) finds no
// reply rather than an empty one. The sender never touches them.
func unsent(ctx context.Context, cmds []goredis.Cmder) error {
	err := ctx.Err()
	for _, c := range cmds {
		c.SetErr(err)
	}
	return err
}

// send sends what is queued, pipeline after pipeline, until the queue is
// empty.
func (p *sharedPipes) send() {
	for {
		p.mu.Lock()
		batch := p.queue
		if len(batch) > maxOrders {
			batch = batch[:maxOrders:maxOrders]
		}
		p.queue = p.queue[len(batch):]
		if len(p.queue) == 0 {
			p.queue = nil
		}
		if len(batch) == 0 {
			p.sending = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		p.sendOne(batch)
	}
}

// sendOne sends the orders of batch whose callers still wait, in one
// pipeline.
func (p *sharedPipes) sendOne(batch []*order) {
	taken := batch[:0]
	var latest time.Time
	bounded := true
	for _, o := range batch {
		if o.ctx.Err() != nil || !o.state.CompareAndSwap(orderWaiting, orderTaken) {
			continue // its caller leaves, or has left, with ctx's error
		}
		taken = append(taken, o)
		if dl, ok := o.ctx.Deadline(); !ok {
			bounded = false
		} else if dl.After(latest) {
			latest = dl
		}
	}
	if len(taken) == 0 {
		return
	}
	// The first caller's values (a trace, a round-trip counter) and no
	// caller's cancellation: the pipeline serves them all.
	ctx := context.WithoutCancel(taken[0].ctx)
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest)
		defer cancel()
	}
	pipe := p.rdb.Pipeline()
	for _, o := range taken {
		_ = pipe.BatchProcess(ctx, o.cmds...)
	}
	// Each command's reply or error is in the command.
	_, _ = pipe.Exec(ctx)
	for _, o := range taken {
		close(o.done)
	}
}
