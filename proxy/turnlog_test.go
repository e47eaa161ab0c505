package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
)

var turnAttrs = [turnLogAttrs]slog.Attr{slog.String("request_id", "req-1"), slog.String("trajectory", "run-1"),
	slog.String("tenant", "demo"), slog.String("model", "claude-sonnet-4-5"), slog.String("api", "messages")}

// TestTurnLoggerWritesWhatWithWrites: a turn's logger writes, line for
// line, what the base logger's With writes, its own With and WithGroup
// included, and a level the base drops stays dropped.
func TestTurnLoggerWritesWhatWithWrites(t *testing.T) {
	logs := func(l *slog.Logger) {
		l.Debug("dropped")
		l.Info("one", slog.Int("n", 1))
		l.With(slog.String("hold", "h-1")).Warn("two")
		l.WithGroup("g").Error("three", slog.Bool("b", true))
		l.Info("four")
		l.LogAttrs(context.Background(), slog.LevelInfo, "ten_attrs", slog.Int("a", 1), slog.Int("b", 2), slog.Int("c", 3),
			slog.Int("d", 4), slog.Int("e", 5), slog.Int("f", 6), slog.Int("g", 7), slog.Int("h", 8), slog.Int("i", 9),
			slog.Group("j", slog.String("k", "v")))
	}
	opts := &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	args := make([]any, len(turnAttrs))
	for i, a := range turnAttrs {
		args[i] = a
	}
	for _, tc := range []struct {
		name    string
		handler func(*bytes.Buffer) slog.Handler
	}{
		{"json", func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, opts) }},
		{"text", func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, opts) }},
	} {
		var want, got bytes.Buffer
		logs(slog.New(tc.handler(&want)).With(args...))
		logs(turnLogger(slog.New(tc.handler(&got)), turnAttrs))
		if got.String() != want.String() {
			t.Errorf("%s: the turn's logger wrote\n%s\nWith writes\n%s", tc.name, got.String(), want.String())
		}
		if !bytes.Contains(got.Bytes(), []byte("request_id")) || !bytes.Contains(got.Bytes(), []byte("ten_attrs")) {
			t.Errorf("%s: the lines do not name the turn, or lost their own attributes:\n%s", tc.name, got.String())
		}
	}
}

// TestTurnLoggerConcurrent: a turn logs from its settle and its reply's
// goroutines at once; every line names it.
func TestTurnLoggerConcurrent(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	l := turnLogger(slog.New(slog.NewJSONHandler(&lockedWriter{mu: &mu, w: &buf}, nil)), turnAttrs)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { l.LogAttrs(context.Background(), slog.LevelWarn, "line") })
	}
	wg.Wait()
	if n := bytes.Count(buf.Bytes(), []byte(`"trajectory":"run-1"`)); n != 8 {
		t.Errorf("%d of 8 lines name the turn:\n%s", n, buf.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestTurnLoggerCostsLittle: naming a turn costs the logger and its
// handler, and its line (the settle's ten attributes) one slice more
// than the base's own line, not the formatting of the turn's attributes
// ahead of it (With's: 9 more in all, against 2). The process's other
// goroutines count too (under the race detector, in a run of the whole
// package, 4 were seen), hence the margin.
func TestTurnLoggerCostsLittle(t *testing.T) {
	base := slog.New(slog.NewJSONHandler(io.Discard, nil))
	line := []slog.Attr{slog.String("call", "c"), slog.String("stop", "end_turn"), slog.Int("status", 200),
		slog.Int64("input_tokens", 1), slog.Int64("cached_input_tokens", 2), slog.Int64("cache_write_tokens", 3),
		slog.Int64("output_tokens", 4), slog.Float64("dollars", 0.5), slog.Bool("estimated", false), slog.Int("tool_calls", 0)}
	ctx := context.Background()
	baseLine := testing.AllocsPerRun(1000, func() { base.LogAttrs(ctx, slog.LevelInfo, "turn", line...) })
	turnLine := testing.AllocsPerRun(1000, func() {
		turnLogger(base, turnAttrs).LogAttrs(ctx, slog.LevelInfo, "turn", line...)
	})
	if turnLine > baseLine+6 {
		t.Errorf("a turn's logger and its line allocate %.0f times, the base's line %.0f; want at most 6 more", turnLine, baseLine)
	}
}
