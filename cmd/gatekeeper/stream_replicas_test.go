package main

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"gatekeeper/config"
	"gatekeeper/internal/redistest"
)

const streamAdmin = "stream-admin-token-0001"

// streamReplica runs one gatekeeper on the Redis at url.
func streamReplica(t *testing.T, url string) string {
	t.Helper()
	cfg, err := config.Parse([]byte(`
store: {kind: redis, redis_url: "`+url+`"}
providers:
  - {name: anthropic, api: anthropic, base_url: "http://127.0.0.1:1", keys: [{name: k, key: sk-x}]}
tenants:
  - {name: team-a, keys: [vk-stream-0000001]}
admin:
  tokens:
    - {name: alice, token: `+streamAdmin+`, roles: [operator]}
`), func(string) string { return "" })
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
	srv := httptest.NewServer(s.handler)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.proxy.Close(ctx)
		s.close()
	})
	return srv.URL
}

// arrival is one record event read from a stream, with when it was read.
type arrival struct {
	id    string
	state string
	at    time.Time
}

// follow reads a replica's stream of one run's record events in the
// background until the test ends.
func follow(t *testing.T, base, run, lastID string) <-chan arrival {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/admin/v1/stream?kind=record&trajectory="+run, nil)
	req.Header.Set("Authorization", "Bearer "+streamAdmin)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", res.StatusCode)
	}
	out := make(chan arrival, 1024)
	go func() {
		defer res.Body.Close()
		defer close(out)
		rd := bufio.NewReader(res.Body)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
			if !ok {
				continue
			}
			now := time.Now()
			var ev struct {
				ID   string `json:"id"`
				Data struct {
					Record struct {
						State string `json:"state"`
					} `json:"record"`
				} `json:"data"`
			}
			if json.Unmarshal([]byte(data), &ev) == nil {
				out <- arrival{id: ev.ID, state: ev.Data.Record.State, at: now}
			}
		}
	}()
	return out
}

func receive(t *testing.T, c <-chan arrival) arrival {
	t.Helper()
	select {
	case a, ok := <-c:
		if !ok {
			t.Fatal("the stream ended")
		}
		return a
	case <-time.After(20 * time.Second):
		t.Fatal("no event")
	}
	return arrival{}
}

// TestStreamAcrossReplicas: 200 changes made through one replica's admin
// API reach a subscriber of the other replica, each once and in order;
// a subscriber resuming from the middle with Last-Event-ID on the first
// replica gets exactly the rest. The delivery latency (request sent to
// event read) is logged for BENCHMARKS.md; nothing here asserts time.
func TestStreamAcrossReplicas(t *testing.T) {
	url := redistest.Start(t)
	a, b := streamReplica(t, url), streamReplica(t, url)
	// Subscribed first: the stream carries every change after the
	// subscription, the creation first.
	events := follow(t, b, "run-x", "")
	if code := adminPost(t, a+"/admin/v1/trajectories", `{"id":"run-x","tenant":"team-a"}`); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	if got := receive(t, events); got.state != "READY" {
		t.Fatalf("the first event on replica b shows %s, want the creation (READY)", got.state)
	}
	const changes = 200
	lat := make([]time.Duration, 0, changes)
	seen := make([]arrival, 0, changes)
	for i := range changes {
		verb, want := "pause", "PAUSED"
		if i%2 == 1 {
			verb, want = "resume", "READY"
		}
		sent := time.Now()
		if code := adminPost(t, a+"/admin/v1/trajectories/run-x/"+verb, ""); code != http.StatusAccepted {
			t.Fatalf("%s: %d", verb, code)
		}
		got := receive(t, events)
		if got.state != want {
			t.Fatalf("change %d: replica b's subscriber saw %s, want %s", i, got.state, want)
		}
		lat = append(lat, got.at.Sub(sent))
		seen = append(seen, got)
	}
	slices.Sort(lat)
	t.Logf("record change on replica a to replica b's subscriber, %d changes: p50 %v, p99 %v, max %v",
		changes, lat[changes/2], lat[changes*99/100-1], lat[changes-1])

	resumed := follow(t, a, "run-x", seen[99].id)
	for i := 100; i < changes; i++ {
		if got := receive(t, resumed); got.id != seen[i].id || got.state != seen[i].state {
			t.Fatalf("resumed at %s on replica a: event %d is %+v, want %+v", seen[99].id, i, got, seen[i])
		}
	}
}

func adminPost(t *testing.T, url, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+streamAdmin)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	return res.StatusCode
}
