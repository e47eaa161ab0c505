package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gatekeeper/internal/redistest"
	"gatekeeper/mockprovider"
)

// relay is a TCP relay on loopback in front of a redis-server that the
// test can pause: while paused, it accepts connections and reads what
// each side sends, and delivers nothing, as a Redis cut off by the
// network does.
type relay struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	closed bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target}
	r.cond = sync.NewCond(&r.mu)
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", r.target, time.Second)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			c.Close()
			up.Close()
			return
		}
		r.conns = append(r.conns, c, up)
		r.mu.Unlock()
		r.wg.Add(2)
		go r.pipe(up, c)
		go r.pipe(c, up)
	}
}

// pipe copies src to dst, each read waiting, before it is written, for
// the relay to be unpaused.
func (r *relay) pipe(dst, src net.Conn) {
	defer r.wg.Done()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			for r.paused && !r.closed {
				r.cond.Wait()
			}
			closed := r.closed
			r.mu.Unlock()
			if closed {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (r *relay) pause(on bool) {
	r.mu.Lock()
	r.paused = on
	r.cond.Broadcast()
	r.mu.Unlock()
}

func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	r.cond.Broadcast()
	conns := r.conns
	r.mu.Unlock()
	r.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	r.wg.Wait()
}

// TestStoreOutageAnswered503OnTime: with the Redis that holds records and
// approvals cut off (a relay that stops delivering), a turn is answered
// 503 within store.timeout plus 100 ms, and its message says the store is
// unavailable. That holds for a new run, and for a plain turn of a gated
// tenant on a thread whose call is in flight, which looks for a held turn
// in the approvals store before it may fork: that lookup failing is the
// store being down, not a tool call that needs approval.
func TestStoreOutageAnswered503OnTime(t *testing.T) {
	const storeTimeout = 300 * time.Millisecond
	srv := redistest.StartServer(t)
	rl := startRelay(t, srv.Addr)
	mock := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	defer mock.Close()

	cfgText := fmt.Sprintf(`
listen: 127.0.0.1:0
store: {kind: redis, redis_url: "redis://%s", timeout: %s, heartbeat: 10s}
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: sk-upstream-0001}]}
tenants:
  - name: fleet
    keys: [%s]
gates:
  - name: destructive-shell
    when: 'tool.name == "Bash" && tool.input.command.matches("rm -rf")'
    approvers: {roles: [secops], quorum: 1}
admin:
  tokens:
    - {name: ops, token: %s, roles: [operator]}
log: {level: info, format: text}
`, rl.addr(), storeTimeout, mock.URL, replicaKey, replicaAdmin)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Let the replica reach Redis again when the test ends (cleanups run
	// after defers): it stops as it would in production.
	defer rl.pause(false)
	base := startReplica(t, cfg).base
	hc := &http.Client{Timeout: 15 * time.Second}
	defer hc.CloseIdleConnections()
	send := func(ctx context.Context, traj, spec string, stream bool) (*http.Response, error) {
		body := fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":256,"stream":%t,"messages":[{"role":"user","content":"tidy the build directory"}]}`, stream)
		req, err := http.NewRequestWithContext(ctx, "POST", base+"/t/"+traj+"/anthropic/v1/messages", strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("x-api-key", replicaKey)
		req.Header.Set("anthropic-version", "2023-06-01")
		req.Header.Set("content-type", "application/json")
		req.Header.Set("X-Mock-Turn", spec)
		return hc.Do(req)
	}

	// A long streamed turn in flight on run "busy", its first bytes read.
	first, err := send(ctx, "busy", `{"kind":"text","deltas":100,"event_delay":"50ms"}`, true)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Body.Close()
	if first.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(first.Body)
		t.Fatalf("first turn: %d %s", first.StatusCode, b)
	}
	if _, err := first.Body.Read(make([]byte, 64)); err != nil {
		t.Fatal(err)
	}

	rl.pause(true)
	bound := storeTimeout + 100*time.Millisecond
	for _, c := range []struct{ name, traj string }{
		{"a plain turn on a thread with a call in flight", "busy"},
		{"a new run", "fresh"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			resp, err := send(ctx, c.traj, `{"kind":"text","text":"done"}`, false)
			took := time.Since(start)
			if err != nil {
				t.Fatalf("after %s: %v", took, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Errorf("status %d, Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
			}
			if !strings.Contains(string(b), "store is unavailable") || strings.Contains(string(b), "approval") {
				t.Errorf("the 503 does not say the store is unavailable: %s", b)
			}
			if took > bound {
				t.Errorf("answered after %s, more than store.timeout %s + 100ms", took, storeTimeout)
			}
			t.Logf("answered %d after %s", resp.StatusCode, took.Round(time.Millisecond))
		})
	}
}
