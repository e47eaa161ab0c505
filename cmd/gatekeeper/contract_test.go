package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gatekeeper/admin/admintest"
	"gatekeeper/config"
	"gatekeeper/internal/redistest"
)

// TestAdminAPIContract drives every route of the admin API on a whole
// gatekeeper (the built-in mock provider, a gate, the memory store or
// Redis) through a run with turns, a held call approved, a child, a budget
// change, control requests, an outcome and a cost report, and validates
// every request and response against the OpenAPI document and every event
// of the live stream against its JSON Schema. Each documented operation
// must have answered its success status, and the errors 400, 401, 403,
// 404 and 409 must each have been seen and validated.
func TestAdminAPIContract(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			yaml := consoleYAML
			if kind == "redis" {
				yaml += "store: {kind: redis, redis_url: " + redistest.StartServer(t).URL + "}\n"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			c, err := admintest.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			contractScenario(ctx, t, c, contractServer(t, yaml))
		})
	}
}

// contractServer runs gatekeeper on cfg, as consoleServer does.
func contractServer(t *testing.T, yaml string) string {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), func(string) string { return "" })
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
	// A config file to reload: the same config, so a reload changes nothing.
	s.path = filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(s.path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.handler)
	t.Cleanup(func() {
		s.proxy.EndHolds()
		s.feed.EndSubscriptions()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.proxy.Close(ctx)
		s.close()
	})
	return srv.URL
}

// contractClient calls the admin API and validates each exchange.
type contractClient struct {
	t    *testing.T
	ctx  context.Context
	c    *admintest.Contract
	base string
}

// call sends body (nil: none) with token ("": none), validates the
// exchange and returns the status and the body.
func (cc contractClient) call(method, path, token string, body any) (int, []byte) {
	cc.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			cc.t.Fatal(err)
		}
	}
	req, err := http.NewRequestWithContext(cc.ctx, method, cc.base+path, bytes.NewReader(raw))
	if err != nil {
		cc.t.Fatal(err)
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cc.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		cc.t.Fatalf("%s %s: %v", method, path, err)
	}
	if err := cc.c.Check(cc.ctx, admintest.Exchange{Request: req, RequestBody: raw, Status: resp.StatusCode, Header: resp.Header, Body: out}); err != nil {
		cc.t.Error(err)
	}
	return resp.StatusCode, out
}

// want calls and fails the test unless the status is code.
func (cc contractClient) want(code int, method, path, token string, body any) []byte {
	cc.t.Helper()
	st, out := cc.call(method, path, token, body)
	if st != code {
		cc.t.Fatalf("%s %s: %d, want %d: %s", method, path, st, code, out)
	}
	return out
}

// contractStream follows the live event stream, validating each event.
type contractStream struct {
	mu    sync.Mutex
	kinds map[string]int
	bad   []error
	done  chan struct{}
}

func (cs *contractStream) seen(kinds ...string) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, k := range kinds {
		if cs.kinds[k] == 0 {
			return false
		}
	}
	return true
}

func followStream(ctx context.Context, t *testing.T, cc contractClient) *contractStream {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cc.base+"/admin/v1/stream?kind=record,turn&kind=approval&kind=keys", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+consoleOperator)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := cc.c.Check(ctx, admintest.Exchange{Request: req, Status: resp.StatusCode, Header: resp.Header}); err != nil {
		t.Error(err)
	}
	cs := &contractStream{kinds: map[string]int{}, done: make(chan struct{})}
	go func() {
		defer close(cs.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		var event string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data := []byte(strings.TrimPrefix(line, "data: "))
				err := cc.c.CheckEvent(data)
				var ev struct{ Kind string }
				if jerr := json.Unmarshal(data, &ev); err == nil && (jerr != nil || ev.Kind != event) {
					err = &eventMismatch{event: event, data: string(data)}
				}
				cs.mu.Lock()
				cs.kinds[event]++
				if err != nil {
					cs.bad = append(cs.bad, err)
				}
				cs.mu.Unlock()
			}
		}
	}()
	return cs
}

type eventMismatch struct{ event, data string }

func (e *eventMismatch) Error() string {
	return "SSE event " + e.event + " carries data of another kind: " + e.data
}

func contractScenario(ctx context.Context, t *testing.T, c *admintest.Contract, base string) {
	cc := contractClient{t: t, ctx: ctx, c: c, base: base}
	const op, apr = consoleOperator, consoleApprover
	sctx, stop := context.WithCancel(ctx)
	stream := followStream(sctx, t, cc)

	// The contract documents are served without a token.
	cc.want(200, "GET", "/admin/v1/openapi.json", "", nil)
	cc.want(200, "GET", "/admin/v1/events.schema.json", "", nil)
	cc.want(200, "GET", "/admin/v1/whoami", op, nil)
	cc.want(200, "POST", "/admin/v1/config/reload", op, nil)
	cc.want(403, "POST", "/admin/v1/config/reload", apr, nil)

	// A run created ahead of time, and a child under it.
	cc.want(201, "POST", "/admin/v1/trajectories", op, map[string]any{"id": "run-c", "tenant": "team-a",
		"budget": map[string]any{"turns": 40, "dollars": 3, "on_exhaust": "pause"}})
	cc.want(201, "POST", "/admin/v1/trajectories", op, map[string]any{"id": "sub", "tenant": "team-a", "parent_id": "run-c"})

	// A turn, then a call the gate holds, approved through the API.
	startCall(consoleClient(base, "run-c", `{"kind":"text","text":"Looking."}`), userTurn("look around")).wait(t)
	held := startCall(consoleClient(base, "run-c", `{"kind":"tool","tools":[{"name":"Bash","input":{"command":"rm -rf /tmp/scratch"}}]}`), userTurn("clean up"))
	var pending struct {
		Approvals []struct{ ID string } `json:"approvals"`
	}
	for i := 0; len(pending.Approvals) == 0; i++ {
		if i == 200 {
			t.Fatal("no pending approval request after 10 s")
		}
		time.Sleep(50 * time.Millisecond)
		if err := json.Unmarshal(cc.want(200, "GET", "/admin/v1/approvals?state=pending&root=run-c&limit=10", op, nil), &pending); err != nil {
			t.Fatal(err)
		}
	}
	id := pending.Approvals[0].ID
	cc.want(200, "GET", "/admin/v1/approvals/"+id, apr, nil)
	cc.want(403, "POST", "/admin/v1/approvals/"+id+"/approve", op, nil)
	cc.want(200, "POST", "/admin/v1/approvals/"+id+"/approve", apr, map[string]string{"reason": "scratch space"})
	cc.want(409, "POST", "/admin/v1/approvals/"+id+"/deny", apr, nil)
	held.wait(t)

	// Reads.
	cc.want(200, "GET", "/admin/v1/trajectories?tenant=team-a&limit=10", op, nil)
	cc.want(200, "GET", "/admin/v1/trajectories/run-c", apr, nil)
	cc.want(200, "GET", "/admin/v1/trajectories/run-c%2Fsub?tenant=team-a", op, nil)
	cc.want(200, "GET", "/admin/v1/trajectories/team-a%2Frun-c", op, nil)
	cc.want(200, "GET", "/admin/v1/trajectories/run-c/events?limit=100", op, nil)
	cc.want(200, "GET", "/admin/v1/trajectories/run-c/events?after=2", op, nil)

	// A budget change, control requests, an outcome, a report.
	cc.want(200, "PATCH", "/admin/v1/trajectories/run-c/budget", op, map[string]any{"dollars": 5, "reason": "more room"})
	cc.want(202, "POST", "/admin/v1/trajectories/run-c/pause", op, map[string]string{"reason": "look"})
	cc.want(202, "POST", "/admin/v1/trajectories/run-c/resume", op, nil)
	cc.want(202, "POST", "/admin/v1/trajectories/run-c/interrupt", op, map[string]string{"message": "Stop and summarize."})
	cc.want(202, "POST", "/admin/v1/trajectories/run-c%2Fsub/kill", op, nil)
	cc.want(202, "POST", "/admin/v1/trajectories/run-c/finish", op, map[string]string{"reason": "done"})
	cc.want(200, "POST", "/admin/v1/trajectories/run-c/outcome", op, map[string]any{"accepted": true, "task_class": "bugfix"})
	var rep struct{ Runs int }
	if err := json.Unmarshal(cc.want(200, "GET", "/admin/v1/reports/costs?tenant=team-a&since=30d", op, nil), &rep); err != nil || rep.Runs != 1 {
		t.Errorf("cost report: %d runs, %v; want the one run marked", rep.Runs, err)
	}
	cc.want(200, "GET", "/admin/v1/tenants", op, nil)
	cc.want(200, "GET", "/admin/v1/tenants/team-a", op, nil)
	cc.want(200, "GET", "/admin/v1/keys", apr, nil)
	// Spend limits on people, in the shape of Anthropic's Admin API.
	var limit struct{ ID string }
	if err := json.Unmarshal(cc.want(200, "POST", "/admin/v1/organizations/spend_limits", op,
		map[string]any{"scope": map[string]string{"type": "user", "user_id": "ada"}, "amount": "500", "period": "daily"}), &limit); err != nil || limit.ID == "" {
		t.Fatalf("set a spend limit: id %q, %v", limit.ID, err)
	}
	cc.want(200, "GET", "/admin/v1/organizations/spend_limits", op, nil)
	cc.want(200, "GET", "/admin/v1/organizations/spend_limits/"+limit.ID, op, nil)
	cc.want(200, "POST", "/admin/v1/organizations/spend_limits/"+limit.ID, op, map[string]string{"amount": "700"})
	cc.want(200, "DELETE", "/admin/v1/organizations/spend_limits/"+limit.ID, op, nil)

	// Refusals, in the document's error format.
	cc.want(401, "GET", "/admin/v1/trajectories", "", nil)
	cc.want(401, "GET", "/admin/v1/stream", "not-a-token-of-this-gatekeeper", nil)
	cc.want(403, "GET", "/admin/v1/tenants", apr, nil)
	cc.want(403, "POST", "/admin/v1/trajectories/run-c/pause", apr, nil)
	cc.want(404, "GET", "/admin/v1/trajectories/no-such-run", op, nil)
	cc.want(404, "GET", "/admin/v1/tenants/no-such-tenant", op, nil)
	cc.want(400, "POST", "/admin/v1/trajectories", op, `{"tenant": "team-a", "budgets": {}}`)
	cc.want(400, "PATCH", "/admin/v1/trajectories/run-c/budget", op, map[string]any{})
	cc.want(400, "GET", "/admin/v1/reports/costs?since=yesterday", op, nil)
	cc.want(409, "POST", "/admin/v1/trajectories/run-c/cancel", op, nil)
	cc.want(409, "PATCH", "/admin/v1/trajectories/run-c/budget", op, map[string]any{"turns": 10})

	for i := 0; !stream.seen("record", "turn", "approval", "keys"); i++ {
		if i == 300 {
			t.Fatalf("the stream brought %v; want record, turn, approval and keys events", stream.kinds)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	<-stream.done
	for _, err := range stream.bad {
		t.Error(err)
	}
	t.Logf("stream events validated: %v", stream.kinds)
	if missing := c.Unseen(); len(missing) > 0 {
		t.Errorf("operations never answered their success status: %v", missing)
	}
	for _, code := range []int{400, 401, 403, 404, 409} {
		if !slices.Contains(c.Statuses(), code) {
			t.Errorf("no %d response validated", code)
		}
	}
}
