package mockprovider

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func startRun(t *testing.T, ctx context.Context, opts Options) (addr string, done chan error) {
	t.Helper()
	ready := make(chan string, 1)
	done = make(chan error, 1)
	go func() { done <- Run(ctx, "127.0.0.1:0", opts, func(a string) { ready <- a }) }()
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run never became ready")
	}
	return addr, done
}

func waitRun(t *testing.T, done chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
}

func TestRunStartsAndStops(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done := startRun(t, ctx, Options{})
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	resp, err := client.Head("http://" + addr + "/")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD: %v %v", resp, err)
	}
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer k")
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Errorf("stream %q", body)
	}
	tr.CloseIdleConnections()
	cancel()
	waitRun(t, done)
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("still listening after Run returned")
	}
}

// TestRunFinishesStreamsOnShutdown cancels Run while a stream is held
// between events: shutdown waits for it, and the client gets every event.
func TestRunFinishesStreamsOnShutdown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	gate := newGatedSleep()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done := startRun(t, ctx, Options{Sleep: gate.Sleep})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/messages",
		strings.NewReader(`{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("x-api-key", "k")
	req.Header.Set(HeaderTurn, `{"text":"a b","deltas":1,"event_delay":"1s"}`)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	first, err := readEvent(r)
	if err != nil || first.name != "message_start" {
		t.Fatalf("first event %+v, %v", first, err)
	}
	within(t, "server to hold the stream", gate.waiting, false)
	cancel() // shutdown starts while the stream is held
	for k := 1; k < 100; k++ {
		within(t, "release", gate.release, true)
		ev, err := readEvent(r)
		if err != nil {
			t.Fatalf("event %d after shutdown began: %v", k, err)
		}
		if ev.name == "message_stop" {
			break
		}
		within(t, "server to wait", gate.waiting, false)
	}
	waitRun(t, done)
}

func TestRunListenError(t *testing.T) {
	err := Run(context.Background(), "127.0.0.1:-1", Options{}, nil)
	if err == nil {
		t.Fatal("Run on a bad address returned nil")
	}
}
