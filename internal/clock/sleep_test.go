package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	tests := []struct {
		name   string
		cancel bool
		d      time.Duration
		want   error
	}{
		{name: "elapsed", d: time.Millisecond},
		{name: "canceled", cancel: true, d: time.Hour, want: context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			if err := Sleep(ctx, tc.d); !errors.Is(err, tc.want) {
				t.Fatalf("Sleep = %v, want %v", err, tc.want)
			}
		})
	}
}
