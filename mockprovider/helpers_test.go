package mockprovider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// tickClock is a clock that advances one millisecond per reading, so
// recorded times are distinct and ordered without sleeping.
type tickClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTickClock() *tickClock {
	return &tickClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
}

func (c *tickClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Millisecond)
	return c.now
}

// newMock starts a seeded mock on a loopback httptest server.
func newMock(t testing.TB, opts Options) (*Server, string) {
	t.Helper()
	if opts.Rand == nil {
		opts.Rand = rand.New(rand.NewPCG(1, 2))
	}
	if opts.Clock == nil {
		opts.Clock = newTickClock().Now
	}
	s := New(opts)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL
}

// post sends a raw turn request with both providers' auth headers.
func post(t testing.TB, ctx context.Context, url, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", "sk-test")
	req.Header.Set("Authorization", "Bearer sk-test")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

type sseEvent struct {
	name string // the "event:" field, empty when absent
	data string
}

// errSSE reports a malformed stream.
var errSSE = errors.New("malformed SSE")

// readEvent reads one event strictly: only "event:" and "data:" lines, one
// data line, ended by a blank line. It returns io.EOF at a clean end.
func readEvent(r *bufio.Reader) (sseEvent, error) {
	var ev sseEvent
	lines := 0
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && line == "" && lines == 0 {
				return ev, io.EOF
			}
			if errors.Is(err, io.EOF) {
				return ev, io.ErrUnexpectedEOF
			}
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if lines == 0 {
				return ev, errSSE
			}
			return ev, nil
		}
		lines++
		switch {
		case strings.HasPrefix(line, "event: ") && ev.name == "" && ev.data == "":
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && ev.data == "":
			ev.data = strings.TrimPrefix(line, "data: ")
		default:
			return ev, errSSE
		}
	}
}

// readAllEvents reads events until the end of the body; err is the reason
// reading stopped early (nil for a clean end).
func readAllEvents(body io.Reader) ([]sseEvent, error) {
	r := bufio.NewReader(body)
	var events []sseEvent
	for range 100000 {
		ev, err := readEvent(r)
		if errors.Is(err, io.EOF) {
			return events, nil
		}
		if err != nil {
			return events, err
		}
		events = append(events, ev)
	}
	return events, errors.New("too many events")
}

// eventType is the JSON "type" of an event's data.
func eventType(t testing.TB, ev sseEvent) string {
	t.Helper()
	var v struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal([]byte(ev.data), &v); err != nil {
		t.Fatalf("event %q: data is not JSON: %v\n%s", ev.name, err, ev.data)
	}
	return v.Type
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// jsonEqual compares two JSON texts as values.
func jsonEqual(t testing.TB, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("not JSON: %v: %s", err, a)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// onlyRequest returns the single recorded request after its handler ended.
func onlyRequest(t testing.TB, s *Server) RecordedRequest {
	t.Helper()
	if err := s.WaitIdle(testContext(t)); err != nil {
		t.Fatal(err)
	}
	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("recorded %d requests, want 1", len(reqs))
	}
	return reqs[0]
}
