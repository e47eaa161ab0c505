package main

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"gatekeeper/config"
)

// lockedBuffer is a bytes.Buffer safe to read while the log writes it.
type lockedBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes++
	return l.b.Write(p)
}

func (l *lockedBuffer) read() (string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String(), l.writes
}

// TestLogBatches: info lines reach the output together within
// logFlushEvery, in one write; a warning is written at once with the
// lines before it; Close writes what is left.
func TestLogBatches(t *testing.T) {
	out := &lockedBuffer{}
	lw := newLogWriter(out)
	log := newLogger(&config.Config{Log: config.Log{Level: "info", Format: "json"}}, lw)
	for i := range 50 {
		log.Info("turn", slog.Int("n", i))
	}
	if s, _ := out.read(); s != "" {
		t.Fatalf("info lines written before their batch was due: %q", s)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, writes := out.read()
		if strings.Count(s, `"msg":"turn"`) == 50 {
			if writes != 1 {
				t.Errorf("50 lines took %d writes, want 1", writes)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the batch was not written within 5s: %q", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	log.Info("before")
	log.Warn("store unreachable")
	if s, _ := out.read(); !strings.Contains(s, `"msg":"before"`) || !strings.Contains(s, `"msg":"store unreachable"`) {
		t.Fatalf("a warning and the line before it are not written at once: %q", s)
	}
	log.Info("last")
	if err := lw.Close(); err != nil {
		t.Fatal(err)
	}
	if s, _ := out.read(); !strings.Contains(s, `"msg":"last"`) {
		t.Fatalf("Close left a line unwritten: %q", s)
	}
	log.Info("after close")
	if s, _ := out.read(); !strings.Contains(s, `"msg":"after close"`) {
		t.Fatalf("a line after Close is not written at once: %q", s)
	}
}
