package settle

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/trajectory"
)

// TestTurnDone checks what a settle that an admission's update took
// reports: its events observed and the turn logged when applied, nothing
// when an earlier write applied it, the figures logged when it failed.
func TestTurnDone(t *testing.T) {
	evs := []trajectory.Event{{Type: "turn"}}
	tests := []struct {
		name     string
		err      error
		observed int    // events observed
		log      string // what the log says, "" for nothing
	}{
		{"applied", nil, 1, "msg=turn"},
		{"already settled", outcome.ErrSettled, 0, ""},
		{"failed", errors.New("refused"), 0, `msg="charge not recorded"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			observed := 0
			p := &Turn{Observe: func(e []trajectory.Event) { observed += len(e) },
				Log: slog.New(slog.NewTextHandler(&buf, nil)), Attrs: []slog.Attr{slog.String("call", "c1")}}
			p.Done(context.Background(), evs, tc.err)
			if observed != tc.observed {
				t.Errorf("%d events observed, want %d", observed, tc.observed)
			}
			if got := buf.String(); tc.log == "" && got != "" || !strings.Contains(got, tc.log) {
				t.Errorf("log %q, want %q", got, tc.log)
			}
		})
	}
}
