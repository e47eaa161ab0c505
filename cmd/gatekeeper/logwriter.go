package main

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// Bounds of the log's batching.
const (
	logFlushEvery = 100 * time.Millisecond // the oldest a buffered line gets
	logBufferMax  = 64 << 10               // bytes buffered before a write
)

// logWriter batches the log's lines into fewer writes: every turn logs a
// line, and a write of its own per line costs a system call and holds
// the handler's lock for it on the turn's path. A line waits at most
// logFlushEvery; warnings and errors are written at once (batchHandler),
// and Close writes what is left.
type logWriter struct {
	mu      sync.Mutex
	w       io.Writer
	buf     []byte
	pending bool // a flush is due within logFlushEvery
	closed  bool
	err     error // the last write's error, kept for Close
}

func newLogWriter(w io.Writer) *logWriter { return &logWriter{w: w} }

// Write buffers p; slog's handlers write each line with one Write.
func (lw *logWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.closed {
		return lw.w.Write(p)
	}
	lw.buf = append(lw.buf, p...)
	switch {
	case len(lw.buf) >= logBufferMax:
		lw.flushLocked()
	case !lw.pending:
		lw.pending = true
		time.AfterFunc(logFlushEvery, lw.Flush)
	}
	return len(p), nil
}

// Flush writes what is buffered.
func (lw *logWriter) Flush() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.flushLocked()
}

func (lw *logWriter) flushLocked() {
	lw.pending = false
	if len(lw.buf) == 0 {
		return
	}
	if _, err := lw.w.Write(lw.buf); err != nil {
		lw.err = err
	}
	if cap(lw.buf) > 4*logBufferMax {
		lw.buf = nil // one burst does not pin its buffer
		return
	}
	lw.buf = lw.buf[:0]
}

// Close writes what is buffered; later lines are written at once.
func (lw *logWriter) Close() error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.flushLocked()
	lw.closed = true
	return lw.err
}

// batchHandler writes a warning or an error, and what was buffered
// before it, at once: those are the lines an operator watches for, and
// the last ones before a crash.
type batchHandler struct {
	slog.Handler
	lw *logWriter
}

func (h batchHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		h.lw.Flush()
	}
	return err
}

func (h batchHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return batchHandler{Handler: h.Handler.WithAttrs(as), lw: h.lw}
}

func (h batchHandler) WithGroup(name string) slog.Handler {
	return batchHandler{Handler: h.Handler.WithGroup(name), lw: h.lw}
}
