package settle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
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

// TestRetryReleaseOfAGoneRecord: a release whose record no longer exists
// (a store restarted without its data) is logged as having nothing to
// release, never as left for the sweeper, which has no record to reclaim.
func TestRetryReleaseOfAGoneRecord(t *testing.T) {
	var buf syncLog
	log := slog.New(slog.NewTextHandler(&buf, nil))
	r := NewRetrier()
	r.sleep = func(ctx context.Context, _ time.Duration) error { return ctx.Err() }
	var n atomic.Int32
	r.Retry(log, WriteRelease, func(context.Context) error {
		if n.Add(1) == 1 {
			return trajectory.ErrUnavailable
		}
		return fmt.Errorf("record run-1: %w", trajectory.ErrNotFound)
	}, []slog.Attr{slog.String("trajectory", "run-1")})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.Close(ctx)
	got := buf.String()
	if strings.Contains(got, "sweeper") || !strings.Contains(got, "record no longer exists; nothing to release") {
		t.Errorf("log of a release whose record is gone:\n%s", got)
	}
	if n.Load() != 2 {
		t.Errorf("%d attempts, want 2", n.Load())
	}
}

// syncLog is a log sink a retry's goroutine may write to.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
