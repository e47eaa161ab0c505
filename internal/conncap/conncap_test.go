package conncap_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"gatekeeper/internal/conncap"
)

// serve serves h on a loopback listener capped at max pending connections
// and returns its address and the listener.
func serve(t *testing.T, max int, h http.Handler) (string, *conncap.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := conncap.NewListener(ln, max, nil)
	srv := &http.Server{Handler: h, ConnContext: conncap.ConnContext, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(cl) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), cl
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closed reports whether the server closed c within d.
func closed(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.ReadAll(c)
	return err == nil // EOF: closed by the server; a timeout: still open
}

// waitPending waits up to 5 s for the listener to count n pending
// connections.
func waitPending(t *testing.T, l *conncap.Listener, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); l.Pending() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d pending connections, want %d", l.Pending(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestOldestPendingGivesWay(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer good" {
			conncap.Trust(r.Context())
		}
		_, _ = io.WriteString(w, "ok")
	})
	addr, l := serve(t, 3, h)
	// An agent that authenticated keeps its connection, whatever comes.
	agent := dial(t, addr)
	if _, err := io.WriteString(agent, "GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(agent), nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("agent: %v %v", res, err)
	}
	// Three clients that never send a request fill the cap.
	var slow []net.Conn
	for range 3 {
		c := dial(t, addr)
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHo")
		slow = append(slow, c)
	}
	waitPending(t, l, 3)
	// A fourth closes the oldest, and only it.
	probe := dial(t, addr)
	if !closed(slow[0], 5*time.Second) {
		t.Error("the oldest pending connection is still open past the cap")
	}
	for _, c := range slow[1:] {
		if closed(c, 50*time.Millisecond) {
			t.Error("a newer pending connection was closed")
		}
	}
	if _, err := io.WriteString(probe, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if res, err := http.ReadResponse(bufio.NewReader(probe), nil); err != nil || res.StatusCode != 200 {
		t.Errorf("the newest connection was not served: %v %v", res, err)
	}
	if closed(agent, 50*time.Millisecond) {
		t.Error("the authenticated connection was closed")
	}
	if l.Evicted() != 1 {
		t.Errorf("evicted %d, want 1", l.Evicted())
	}
}

// A connection answering a request it received whole (a probe) is not
// closed for a newer one; the next oldest idle one is.
func TestAnsweringConnectionStays(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := conncap.Bound(time.Second, 16)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow-answer" {
			close(entered)
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	addr, l := serve(t, 2, h)
	probe := dial(t, addr)
	_, _ = io.WriteString(probe, "GET /slow-answer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	<-entered
	idle := dial(t, addr)
	waitPending(t, l, 2)
	dial(t, addr)
	if !closed(idle, 5*time.Second) {
		t.Error("the idle connection was kept past the cap")
	}
	close(release)
	if res, err := http.ReadResponse(bufio.NewReader(probe), nil); err != nil || res.StatusCode != 200 {
		t.Errorf("the connection being answered was closed: %v %v", res, err)
	}
}

func TestBoundClosesSlowBodies(t *testing.T) {
	const timeout = 300 * time.Millisecond
	read := make(chan error, 4)
	mux := http.NewServeMux()
	// /refuse answers without reading the body, as a refusal before
	// authentication does; /read reads it.
	mux.HandleFunc("/refuse", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) })
	mux.HandleFunc("/read", func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		read <- err
		if err != nil {
			return
		}
		// A long answer after the whole body: the deadline is lifted.
		time.Sleep(2 * timeout)
		_, _ = io.WriteString(w, "done")
	})
	addr, _ := serve(t, 100, conncap.Bound(timeout, 16)(mux))

	for _, path := range []string{"/refuse", "/read"} {
		t.Run("trickle "+path, func(t *testing.T) {
			c := dial(t, addr)
			_, _ = io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab")
			start := time.Now()
			if !closed(c, 5*time.Second) {
				t.Fatal("a body that never comes keeps its connection")
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("closed after %s, want about %s", d, timeout)
			}
		})
	}
	if err := <-read; !errors.Is(err, io.ErrUnexpectedEOF) && (err == nil || !strings.Contains(err.Error(), "timeout")) {
		t.Errorf("the handler's read of a slow body: %v, want a timeout", err)
	}

	t.Run("whole body, long answer", func(t *testing.T) {
		c := dial(t, addr)
		_, _ = io.WriteString(c, "POST /read HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nabcd")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("%v %v", res, err)
		}
		if b, _ := io.ReadAll(res.Body); string(b) != "done" {
			t.Errorf("answer %q", b)
		}
		if err := <-read; err != nil {
			t.Errorf("read: %v", err)
		}
	})
}
