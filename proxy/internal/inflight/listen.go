package inflight

import (
	"context"
	"log/slog"
	"time"

	"gatekeeper/trajectory"
)

// resubscribe is how long Listen waits before subscribing again after
// the signals could not be subscribed to.
const resubscribe = 2 * time.Second

// Listen applies the control signals of every replica, from sigs, to the
// registry until ctx ends. While the signals are unavailable it logs so
// to log and subscribes again: controls then act at the next turn
// boundary only.
func (l *Registry[C]) Listen(ctx context.Context, sigs trajectory.Signals, log *slog.Logger) {
	for ctx.Err() == nil {
		ch, err := sigs.Subscribe(ctx)
		if err != nil {
			log.LogAttrs(ctx, slog.LevelWarn, "control signals unavailable; controls act at the next turn boundary", slog.String("error", err.Error()))
			t := time.NewTimer(resubscribe)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		for sig := range ch {
			l.Signal(sig)
		}
	}
}
