package main

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The server takes its header and keep-alive timeouts from limits: with
// both at 100ms, a connection whose headers never end, and one idle after
// its first request, are closed long before the 30 s and 5 min defaults.
func TestServerTimeoutsFromConfig(t *testing.T) {
	base, err := os.ReadFile("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(string(base), "\nlimits:\n", "\nlimits:\n  header_timeout: 100ms\n  idle_timeout: 100ms\n", 1)
	if yaml == string(base) {
		t.Fatal("config.yaml has no limits block to extend")
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-config", path}, env("GATEKEEPER_LISTEN", "127.0.0.1:0"), logs, logs)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop")
		}
	}()
	addrRe := regexp.MustCompile(`msg="gatekeeper listening" addr=(\S+)`)
	var addr string
	for i := 0; i < 500 && addr == ""; i++ {
		if m := addrRe.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	if addr == "" {
		t.Fatalf("gatekeeper did not start:\n%s", logs)
	}

	// closedBy reads c until the server closes it, for at most 10 s.
	closedBy := func(t *testing.T, c net.Conn, r *bufio.Reader) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := r.ReadByte()
		for err == nil {
			_, err = r.ReadByte()
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the server kept the connection open")
		}
	}
	t.Run("headers never end", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: gatekeeper\r\n")); err != nil {
			t.Fatal(err)
		}
		closedBy(t, c, bufio.NewReader(c))
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: gatekeeper\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("healthz: %d, close %v", resp.StatusCode, resp.Close)
		}
		closedBy(t, c, r)
	})
}
