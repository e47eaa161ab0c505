package settle

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"gatekeeper/trajectory"
)

// TestRetry checks that a retried write runs until the store takes it, or
// once more after a failure that is not the store being out, and that
// Close waits for what is retrying.
func TestRetry(t *testing.T) {
	errOther := errors.New("refused")
	tests := []struct {
		name  string
		fails []error // the answers before success; a non-unavailable one ends the retries
		want  int32   // attempts made
	}{
		{"first retry succeeds", nil, 1},
		{"store out twice", []error{trajectory.ErrUnavailable, trajectory.ErrUnavailable}, 3},
		{"another failure ends it", []error{trajectory.ErrUnavailable, errOther, nil}, 2},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRetrier()
			r.sleep = func(ctx context.Context, _ time.Duration) error { return ctx.Err() } // no waiting in tests
			var n atomic.Int32
			r.Retry(log, WriteCharge, func(context.Context) error {
				i := n.Add(1) - 1
				if int(i) < len(tc.fails) {
					return tc.fails[i]
				}
				return nil
			}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r.Close(ctx)
			if ctx.Err() != nil {
				t.Fatal("Close did not return before its deadline")
			}
			if got := n.Load(); got != tc.want {
				t.Fatalf("%d attempts, want %d", got, tc.want)
			}
		})
	}
}

// TestRetryStopsOnClose checks that a write the store never takes stops
// when Close's grace ends.
func TestRetryStopsOnClose(t *testing.T) {
	r := NewRetrier()
	r.sleep = func(ctx context.Context, _ time.Duration) error {
		<-ctx.Done() // the store stays out: each wait lasts until Close stops it
		return ctx.Err()
	}
	var n atomic.Int32
	r.Retry(slog.New(slog.NewTextHandler(io.Discard, nil)), WriteTenant, func(context.Context) error {
		n.Add(1)
		return trajectory.ErrUnavailable
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	r.Close(ctx)
	if got := n.Load(); got != 0 {
		t.Fatalf("%d attempts after Close, want 0", got)
	}
}
