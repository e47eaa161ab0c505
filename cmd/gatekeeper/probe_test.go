package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestProbe: a 2xx answer succeeds; any other status, no listener and an
// answer slower than -timeout fail, each saying why.
func TestProbe(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "store unreachable", http.StatusServiceUnavailable)
	})
	release := make(chan struct{})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(release)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/healthz"
	ln.Close()

	cases := []struct {
		name string
		args []string
		want string // in the error; "" for success
	}{
		{"healthy", []string{"-url", srv.URL + "/healthz"}, ""},
		{"not ready", []string{"-url", srv.URL + "/readyz"}, "answered 503: store unreachable"},
		{"nothing listening", []string{"-url", closed}, "connection refused"},
		{"too slow", []string{"-url", srv.URL + "/slow", "-timeout", "200ms"}, "deadline exceeded"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			start := time.Now()
			err := run(context.Background(), append([]string{"probe"}, c.args...), func(string) string { return "" }, &out, &errb)
			if time.Since(start) > 10*time.Second {
				t.Errorf("the probe took %v", time.Since(start))
			}
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("probe failed: %v", err)
			case c.want == "" && !strings.Contains(out.String(), "ok"):
				t.Errorf("probe printed %q", out.String())
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("probe error %v, want one containing %q", err, c.want)
			}
		})
	}
}
