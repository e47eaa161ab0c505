package main

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"gatekeeper/config"
	"gatekeeper/internal/conncap"
)

// TestSignedSlackDeliveryAuthenticates: the connection of a delivery signed
// with the signing secret stops counting as pending, so newer connections
// close an idle one instead; an unsigned delivery's connection stays
// pending and is closed in turn.
func TestSignedSlackDeliveryAuthenticates(t *testing.T) {
	const secret = "trust-test-signing-secret"
	for _, tc := range []struct {
		name   string
		secret string
		kept   bool
	}{{"signed", secret, true}, {"signed with another secret", "not-the-secret-at-all", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			cl := conncap.NewListener(ln, 1, nil)
			h := trustSigned(secret, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.WriteHeader(http.StatusOK)
			}))
			srv := &http.Server{Handler: h, ConnContext: conncap.ConnContext, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = srv.Serve(cl) }()
			t.Cleanup(func() { _ = srv.Close() })

			slack, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer slack.Close()
			body := "payload=%7B%7D"
			ts := strconv.FormatInt(time.Now().Unix(), 10)
			mac := hmac.New(sha256.New, []byte(tc.secret))
			fmt.Fprintf(mac, "v0:%s:%s", ts, body)
			fmt.Fprintf(slack, "POST /hooks/slack/interactions HTTP/1.1\r\nHost: gk\r\nContent-Type: application/x-www-form-urlencoded\r\n"+
				"X-Slack-Request-Timestamp: %s\r\nX-Slack-Signature: v0=%s\r\nContent-Length: %d\r\n\r\n%s",
				ts, hex.EncodeToString(mac.Sum(nil)), len(body), body)
			rd := bufio.NewReader(slack)
			res, err := http.ReadResponse(rd, nil)
			if err != nil || res.StatusCode != http.StatusOK {
				t.Fatalf("delivery: %v %v", res, err)
			}
			// Two newer connections: with the cap at 1, the second closes
			// the oldest pending one.
			for range 2 {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				time.Sleep(50 * time.Millisecond)
			}
			_ = slack.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			_, err = rd.ReadByte()
			closed := err == io.EOF
			if closed == tc.kept {
				t.Errorf("the delivery's connection closed: %v (%v), want %v", closed, err, !tc.kept)
			}
		})
	}
}

// TestAuthenticatedConnectionsKept: on gatekeeper's own handler, a
// connection whose request carried a valid virtual key (a turn) or admin
// token stops counting as pending, so newer connections close an idle
// one instead; a connection that only asked /healthz stays pending and is
// closed in turn, and one that offered a bad key is closed at once.
func TestAuthenticatedConnectionsKept(t *testing.T) {
	cfg, err := config.Parse([]byte(consoleYAML), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := newServer(context.Background(), cfg, slog.New(slog.DiscardHandler), env())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.proxy.Close(ctx)
		s.close()
	})
	turn := `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`
	for _, tc := range []struct {
		name, request string
		kept          bool
	}{
		{"turn with a virtual key", "POST /anthropic/v1/messages HTTP/1.1\r\nHost: gk\r\nx-api-key: " + consoleKey +
			"\r\nanthropic-version: 2023-06-01\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(turn)) + "\r\n\r\n" + turn, true},
		{"admin call with a token", "GET /admin/v1/whoami HTTP/1.1\r\nHost: gk\r\nAuthorization: Bearer " + consoleOperator + "\r\n\r\n", true},
		{"healthz", "GET /healthz HTTP/1.1\r\nHost: gk\r\n\r\n", false},
		{"turn with a bad key", "POST /anthropic/v1/messages HTTP/1.1\r\nHost: gk\r\nx-api-key: vk-not-a-key\r\nContent-Length: 2\r\n\r\n{}", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			hs := &http.Server{Handler: s.handler, ConnContext: conncap.ConnContext, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = hs.Serve(conncap.NewListener(ln, 1, nil)) }()
			t.Cleanup(func() { _ = hs.Close() })
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _ = io.WriteString(c, tc.request)
			rd := bufio.NewReader(c)
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			res, err := http.ReadResponse(rd, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			for range 2 {
				o, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer o.Close()
				time.Sleep(50 * time.Millisecond)
			}
			_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			_, err = rd.ReadByte()
			if closed := err == io.EOF; closed == tc.kept {
				t.Errorf("answered %d; the connection closed: %v (%v), want %v", res.StatusCode, closed, err, !tc.kept)
			}
		})
	}
}
