package proxy

import (
	"context"
	"log/slog"
	"sync"
)

// turnLogAttrs is how many attributes a turn's logger names it by.
const turnLogAttrs = 5

// turnLogger is base naming a turn by attrs on every line it logs. It
// writes what base.With(attrs) writes, line for line, without asking
// base's handler to format attrs ahead of the lines (With's dozen
// allocations, for a turn that logs one line, or none below Info): a line
// is handed to base with attrs ahead of its own. Only a logger derived
// from it (its With, its WithGroup) has base format them, once.
func turnLogger(base *slog.Logger, attrs [turnLogAttrs]slog.Attr) *slog.Logger {
	return slog.New(&lazyAttrs{base: base.Handler(), attrs: attrs})
}

// lazyAttrs is base with attrs, added when first needed.
type lazyAttrs struct {
	base  slog.Handler
	attrs [turnLogAttrs]slog.Attr
	once  sync.Once
	with  slog.Handler // base.WithAttrs(attrs), once made
}

var _ slog.Handler = (*lazyAttrs)(nil)

func (h *lazyAttrs) handler() slog.Handler {
	h.once.Do(func() { h.with = h.base.WithAttrs(h.attrs[:]) })
	return h.with
}

// Enabled is base's: attributes change no level.
func (h *lazyAttrs) Enabled(ctx context.Context, l slog.Level) bool {
	return h.base.Enabled(ctx, l)
}

// Handle hands base the line with attrs ahead of its own, where With's
// handler would have written them.
func (h *lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	line := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	line.AddAttrs(h.attrs[:]...)
	own := make([]slog.Attr, 0, 16)
	r.Attrs(func(a slog.Attr) bool {
		own = append(own, a)
		return true
	})
	line.AddAttrs(own...)
	return h.base.Handle(ctx, line)
}

func (h *lazyAttrs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return h.handler().WithAttrs(attrs)
}

func (h *lazyAttrs) WithGroup(name string) slog.Handler {
	return h.handler().WithGroup(name)
}
