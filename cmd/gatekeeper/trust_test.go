package main

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

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
