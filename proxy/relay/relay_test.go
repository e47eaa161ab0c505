package relay

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRemoveHopHeaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   http.Header
		want http.Header
	}{
		{"end-to-end headers stay",
			http.Header{"Content-Type": {"text/event-stream"}, "X-Request-Id": {"r1"}},
			http.Header{"Content-Type": {"text/event-stream"}, "X-Request-Id": {"r1"}}},
		{"hop-by-hop headers go",
			http.Header{"Keep-Alive": {"timeout=5"}, "Transfer-Encoding": {"chunked"}, "Upgrade": {"h2c"},
				"Proxy-Authorization": {"Basic x"}, "Te": {"gzip"}, "Trailer": {"X-T"}, "Proxy-Connection": {"keep-alive"},
				"Proxy-Authenticate": {"Basic"}, "Content-Length": {"3"}},
			http.Header{"Content-Length": {"3"}}},
		{"headers Connection names go with it",
			http.Header{"Connection": {"X-Hop, x-other", "X-Third"}, "X-Hop": {"1"}, "X-Other": {"2"}, "X-Third": {"3"}, "X-Kept": {"4"}},
			http.Header{"X-Kept": {"4"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.in.Clone()
			RemoveHopHeaders(h)
			if fmt.Sprint(h) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, want %v", h, tc.want)
			}
		})
	}
}

func TestOutgoingHeader(t *testing.T) {
	in := http.Header{"Connection": {"X-Hop"}, "X-Hop": {"1"}, "Te": {"gzip, trailers;q=1"}, "X-Forwarded-For": {"10.0.0.1"},
		"Forwarded": {"for=10.0.0.1"}, "X-Forwarded-Host": {"h"}, "X-Forwarded-Proto": {"https"}, "Anthropic-Version": {"2023-06-01"}}
	out := OutgoingHeader(in)
	want := http.Header{"Te": {"trailers"}, "Anthropic-Version": {"2023-06-01"}}
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", out, want)
	}
	if in.Get("X-Hop") != "1" || in.Get("X-Forwarded-For") == "" {
		t.Fatalf("the incoming header was changed: %v", in)
	}
	if got := OutgoingHeader(nil); got == nil || len(got) != 0 {
		t.Fatalf("OutgoingHeader(nil) = %v, want an empty header", got)
	}
}

// TestCopyFlushesEachRead runs a provider and a proxy that relays its
// reply: the provider sends its next event only once the client read the
// one before, which it can only do when Copy flushed it at once.
func TestCopyFlushesEachRead(t *testing.T) {
	const events = 5
	seen := make(chan int, events)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "dropped")
		w.Header().Set("Trailer", "X-Usage")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		for i := range events {
			fmt.Fprintf(w, "event: n\ndata: %d\n\n", i)
			_ = rc.Flush()
			select {
			case got := <-seen:
				if got != i {
					t.Errorf("the client saw event %d, want %d", got, i)
					return
				}
			case <-time.After(10 * time.Second):
				t.Errorf("event %d did not reach the client", i)
				return
			}
		}
		w.Header().Set("X-Usage", "42")
	}))
	defer backend.Close()
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get(backend.URL)
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		if err := Copy(w, resp, make([]byte, 64)); err != nil {
			t.Errorf("Copy: %v", err)
		}
	}))
	defer front.Close()

	resp, err := http.Get(front.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("X-Hop") != "" {
		t.Errorf("a header the provider's Connection named reached the client")
	}
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("Content-Type = %q", resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	for i := range events {
		var lines []string
		for len(lines) < 3 {
			l, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			lines = append(lines, l)
		}
		if want := fmt.Sprintf("event: n\ndata: %d\n\n", i); strings.Join(lines, "") != want {
			t.Fatalf("event %d = %q, want %q", i, strings.Join(lines, ""), want)
		}
		seen <- i
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Fatal(err)
	}
	if got := resp.Trailer.Get("X-Usage"); got != "42" {
		t.Errorf("trailer X-Usage = %q, want 42", got)
	}
}

// brokenBody yields some bytes, then fails.
type brokenBody struct{ n int }

func (b *brokenBody) Read(p []byte) (int, error) {
	if b.n == 0 {
		b.n++
		return copy(p, "data: 1\n\n"), nil
	}
	return 0, io.ErrUnexpectedEOF
}

func (b *brokenBody) Close() error { return nil }

// failingWriter is a ResponseWriter whose connection is gone.
type failingWriter struct{ h http.Header }

func (w *failingWriter) Header() http.Header       { return w.h }
func (w *failingWriter) Write([]byte) (int, error) { return 0, errors.New("connection reset") }
func (w *failingWriter) WriteHeader(int)           {}

// TestCopyHeadersStayApart: the reply's headers share the provider's
// values without allocating, yet a value added to either side later is
// not seen by the other, even where a value slice has room to grow.
func TestCopyHeadersStayApart(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("X-Gatekeeper-Run", "run-1")
	roomy := make([]string, 1, 4)
	roomy[0] = "a"
	resp := &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("ok")),
		Header: http.Header{"X-Provider": roomy, "X-Gatekeeper-Run": {"upstream"}}}
	if err := Copy(rec, resp, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	rec.Header().Add("X-Provider", "added-to-the-reply")
	resp.Header.Add("X-Provider", "added-to-the-response")
	if got := rec.Header()["X-Provider"]; len(got) != 2 || got[0] != "a" || got[1] != "added-to-the-reply" {
		t.Errorf("the reply's X-Provider = %q, want [a added-to-the-reply]", got)
	}
	if got := resp.Header["X-Provider"]; len(got) != 2 || got[1] != "added-to-the-response" {
		t.Errorf("the response's X-Provider = %q, want [a added-to-the-response]", got)
	}
	if got := rec.Header()["X-Gatekeeper-Run"]; len(got) != 2 || got[0] != "run-1" || got[1] != "upstream" {
		t.Errorf("a header the reply had already = %q, want its value then the provider's", got)
	}
}

func TestCopyNamesTheSideThatFailed(t *testing.T) {
	t.Run("read", func(t *testing.T) {
		rec := httptest.NewRecorder()
		err := Copy(rec, &http.Response{StatusCode: 200, Header: http.Header{}, Body: &brokenBody{}}, make([]byte, 64))
		if !errors.Is(err, ErrRead) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err = %v, want ErrRead wrapping io.ErrUnexpectedEOF", err)
		}
		if rec.Body.String() != "data: 1\n\n" || !rec.Flushed {
			t.Fatalf("the bytes before the failure were not relayed and flushed: %q, flushed %v", rec.Body.String(), rec.Flushed)
		}
	})
	t.Run("write", func(t *testing.T) {
		err := Copy(&failingWriter{h: http.Header{}}, &http.Response{StatusCode: 200, Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("data: 1\n\n"))}, make([]byte, 64))
		if !errors.Is(err, ErrWrite) || errors.Is(err, ErrRead) {
			t.Fatalf("err = %v, want ErrWrite", err)
		}
	})
}

func TestUpstreamReadsAsideWhileQuiet(t *testing.T) {
	pr, pw := io.Pipe()
	u := NewUpstream(pr, make([]byte, 64))
	if _, err := u.Read(0); !errors.Is(err, ErrQuiet) {
		t.Fatalf("a provider that sent nothing: err = %v, want ErrQuiet", err)
	}
	if _, err := u.Read(time.Millisecond); !errors.Is(err, ErrQuiet) {
		t.Fatalf("still nothing: err = %v, want ErrQuiet", err)
	}
	go func() { _, _ = pw.Write([]byte("data: 1\n\n")) }()
	// The read aside takes what came; a plain read waits for it.
	b, err := u.Read(-1)
	if err != nil || string(b) != "data: 1\n\n" {
		t.Fatalf("Read = %q, %v", b, err)
	}
	go func() { _, _ = pw.Write([]byte("data: 2\n\n")) }()
	if b, err = u.Read(-1); err != nil || string(b) != "data: 2\n\n" {
		t.Fatalf("plain Read = %q, %v", b, err)
	}
	// A read aside still running when the body closes ends with it.
	if _, err := u.Read(0); !errors.Is(err, ErrQuiet) {
		t.Fatalf("err = %v, want ErrQuiet", err)
	}
	done := make(chan error, 1)
	go func() { done <- u.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the read aside")
	}
	if u.reading != nil {
		t.Fatal("the read aside outlived Close")
	}
}
