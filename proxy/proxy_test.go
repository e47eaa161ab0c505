package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"gatekeeper/trajectory"
)

func TestAgentErrorsInProviderFormat(t *testing.T) {
	e := newEnv(t, envOpts{limits: "limits: {max_body_bytes: 4096}"})
	big := anthropicReq(false, strings.Repeat("x", 5000))
	cases := []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		errPath, errType         string // gjson path of the error type in the body, and its value
	}{
		{"anthropic missing key", "POST", "/anthropic/v1/messages", anthropicReq(false, "hi"),
			[]string{"content-type", "application/json"}, 401, "error.type", "authentication_error"},
		{"anthropic wrong key", "POST", "/anthropic/v1/messages", anthropicReq(false, "hi"),
			[]string{"x-api-key", "vk-nope"}, 401, "error.type", "authentication_error"},
		{"provider key is not a virtual key", "POST", "/anthropic/v1/messages", anthropicReq(false, "hi"),
			[]string{"x-api-key", antKey}, 401, "error.type", "authentication_error"},
		{"openai missing key", "POST", "/openai/v1/chat/completions", `{"model":"gpt-4.1","messages":[]}`,
			nil, 401, "error.type", "authentication_error"},
		{"openai bearer wrong", "POST", "/openai/v1/responses", `{"model":"gpt-4.1","input":"hi"}`,
			[]string{"authorization", "Bearer vk-nope"}, 401, "error.code", "authentication_error"},
		{"malformed json", "POST", "/anthropic/v1/messages", `{"model":`,
			hdr(), 400, "error.type", "invalid_request_error"},
		{"body too large", "POST", "/anthropic/v1/messages", big,
			hdr(), 413, "error.type", "invalid_request_error"},
		{"unknown provider", "POST", "/nope/v1/messages", "{}",
			hdr(), 404, "error.type", "not_found_error"},
		{"bad trajectory id", "POST", "/t/bad%20id/anthropic/v1/messages", anthropicReq(false, "hi"),
			hdr(), 400, "error.type", "invalid_request_error"},
		{"bad trajectory header", "POST", "/anthropic/v1/messages", anthropicReq(false, "hi"),
			hdr("X-Gatekeeper-Trajectory", "no/slashes"), 400, "error.type", "invalid_request_error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.mock.Requests())
			resp := e.do(t, tc.method, tc.path, tc.body, tc.hdr...)
			body := readAll(t, resp)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if got := gjson.GetBytes(body, tc.errPath).String(); got != tc.errType {
				t.Fatalf("%s = %q, want %q in %s", tc.errPath, got, tc.errType, body)
			}
			if msg := gjson.GetBytes(body, "error.message").String(); len(msg) < 10 {
				t.Fatalf("error message %q does not say what to do", msg)
			}
			if strings.Contains(tc.path, "anthropic") && gjson.GetBytes(body, "type").String() != "error" {
				t.Fatalf("anthropic error body lacks type:error: %s", body)
			}
			if n := len(e.mock.Requests()); n != before {
				t.Fatalf("a refused request reached the provider (%d → %d requests)", before, n)
			}
		})
	}
}

func TestTransparentForwarding(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp := e.do(t, "POST", "/anthropic/v1/messages?beta=true", anthropicReq(false, "hello there"),
		hdr("anthropic-beta", "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14",
			"X-Claude-Code-Session-Id", "sess-1", "x-app", "cli", "Accept-Encoding", "gzip, br, zstd",
			"X-Gatekeeper-Budget", `{"dollars":1e9}`, "User-Agent", "claude-cli/2.1.197")...)
	body := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if resp.Header.Get("request-id") == "" {
		t.Error("upstream request-id header did not reach the agent")
	}
	tid := resp.Header.Get("X-Gatekeeper-Trajectory")
	if tid == "" {
		t.Fatal("no X-Gatekeeper-Trajectory on a proxied turn")
	}
	reqs := e.mock.Requests()
	if len(reqs) != 1 {
		t.Fatalf("provider saw %d requests", len(reqs))
	}
	got := reqs[0]
	if got.APIKey != antKey {
		t.Errorf("provider got key %q, want the pool key", got.APIKey)
	}
	if got.RawQuery != "beta=true" || got.Path != "/v1/messages" {
		t.Errorf("provider got %s?%s", got.Path, got.RawQuery)
	}
	if string(got.Body) != anthropicReq(false, "hello there") {
		t.Error("request body changed on the way")
	}
	for _, h := range []string{"Anthropic-Beta", "Anthropic-Version", "X-Claude-Code-Session-Id", "X-App"} {
		if got.Header.Get(h) == "" {
			t.Errorf("header %s was not forwarded", h)
		}
	}
	if ua := got.Header.Get("User-Agent"); ua != "claude-cli/2.1.197" {
		t.Errorf("User-Agent = %q", ua)
	}
	if ae := got.Header.Get("Accept-Encoding"); ae != "identity" {
		t.Errorf("turns must ask upstream for identity encoding, got %q", ae)
	}
	for k, v := range got.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-gatekeeper") {
			t.Errorf("gatekeeper header %s reached the provider", k)
		}
		for _, s := range v {
			if strings.Contains(s, vkA) {
				t.Errorf("the virtual key reached the provider in %s", k)
			}
		}
	}
	rec := e.record(t, tid)
	if rec.Tenant != "team-a" || rec.Budget.Dollars != 20 {
		t.Errorf("record tenant %q budget %+v: the budget comes from config only", rec.Tenant, rec.Budget)
	}
}

func TestHeadAndPassThrough(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, p := range []string{"/", "/anthropic", "/anthropic/", "/t/run-1/anthropic", "/openai/"} {
		resp := e.do(t, "HEAD", p, "")
		readAll(t, resp)
		if resp.StatusCode != 200 {
			t.Errorf("HEAD %s: %d", p, resp.StatusCode)
		}
	}
	resp := e.do(t, "GET", "/anthropic/v1/models?limit=1000", "", "x-api-key", vkA, "anthropic-version", "2023-06-01")
	body := readAll(t, resp)
	if resp.StatusCode != 200 || !gjson.GetBytes(body, "data").IsArray() {
		t.Fatalf("models pass-through: %d %s", resp.StatusCode, body)
	}
	last := e.mock.Requests()[len(e.mock.Requests())-1]
	if last.APIKey != antKey || last.RawQuery != "limit=1000" {
		t.Errorf("pass-through reached upstream with key %q query %q", last.APIKey, last.RawQuery)
	}
	recs, err := e.store.List(context.Background(), trajectory.Filter{})
	if err != nil || len(recs) != 0 {
		t.Errorf("pass-through created records: %v %v", recs, err)
	}
	// Default provider at the root.
	resp = e.do(t, "POST", "/v1/messages", anthropicReq(false, "hi"), hdr()...)
	if body := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("/v1/messages: %d %s", resp.StatusCode, body)
	}
	// Pass-through without a key is refused too: nobody borrows the pool key.
	resp = e.do(t, "GET", "/openai/v1/models", "")
	readAll(t, resp)
	if resp.StatusCode != 401 {
		t.Errorf("keyless pass-through: %d", resp.StatusCode)
	}
}

func TestWebSocketUpgradeRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp := e.do(t, "GET", "/openai/v1/responses", "", "Authorization", "Bearer "+vkA, "Connection", "Upgrade",
		"Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==",
		"openai-beta", "responses_websockets=2026-02-04")
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if len(e.mock.Requests()) != 0 {
		t.Error("the upgrade reached the provider")
	}
}

func TestToolRoundTripWalksStates(t *testing.T) {
	e := newEnv(t, envOpts{})
	turn := `{"kind":"tool","tools":[{"name":"Bash","input":{"command":"ls"}},{"name":"Bash","input":{"command":"pwd"}}]}`
	resp := e.do(t, "POST", "/t/run-42/anthropic/v1/messages", anthropicReq(true, "list files"), hdr("X-Mock-Turn", turn)...)
	body := readAll(t, resp)
	if resp.StatusCode != 200 || resp.Header.Get("X-Gatekeeper-Trajectory") != "run-42" {
		t.Fatalf("status %d trajectory %q", resp.StatusCode, resp.Header.Get("X-Gatekeeper-Trajectory"))
	}
	var ids []string
	for _, ev := range sseEvents(body) {
		data := ev[strings.Index(ev, "data:")+5:]
		if gjson.Get(data, "content_block.type").String() == "tool_use" {
			ids = append(ids, gjson.Get(data, "content_block.id").String())
		}
	}
	if len(ids) != 2 {
		t.Fatalf("reply carried %d tool calls", len(ids))
	}
	var rec *trajectory.Record
	waitFor(t, "WAITING_TOOL", func() bool { rec = e.record(t, "run-42"); return rec.State == trajectory.WaitingTool })
	var pending []string
	for _, pc := range rec.Pending.ToolCalls {
		pending = append(pending, pc.ID)
		if pc.Name != "Bash" || pc.Deadline.IsZero() {
			t.Errorf("pending call %+v", pc)
		}
	}
	if !slices.Equal(pending, ids) || rec.Turns != 1 || rec.LastStopReason != "tool_use" {
		t.Fatalf("record after tool turn: pending %v (want %v) turns %d stop %q", pending, ids, rec.Turns, rec.LastStopReason)
	}
	if rec.Spend.InputTokens == 0 || rec.Spend.OutputTokens == 0 || rec.Spend.Estimated {
		t.Errorf("spend not charged from the reported usage: %+v", rec.Spend)
	}

	// The next request answers one pending call and one unknown id.
	next := fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,"messages":[
{"role":"user","content":"list files"},
{"role":"assistant","content":[{"type":"tool_use","id":%q,"name":"Bash","input":{"command":"ls"}},{"type":"tool_use","id":%q,"name":"Bash","input":{"command":"pwd"}}]},
{"role":"user","content":[{"type":"tool_result","tool_use_id":%q,"content":"a.txt"},{"type":"tool_result","tool_use_id":"toolu_forged","content":"x"}]}],
"tools":[{"name":"Bash","input_schema":{"type":"object"}}]}`, ids[0], ids[1], ids[0])
	resp = e.do(t, "POST", "/t/run-42/anthropic/v1/messages", next, hdr()...)
	readAll(t, resp)
	waitFor(t, "READY after the final text", func() bool {
		rec = e.record(t, "run-42")
		return rec.State == trajectory.Ready && rec.Turns == 2
	})
	if len(rec.Pending.ToolCalls) != 0 || rec.LastStopReason != "end_turn" {
		t.Fatalf("pending %v stop %q", rec.Pending.ToolCalls, rec.LastStopReason)
	}
	var walk []string
	var unknown, accepted string
	for _, ev := range e.events(t, "run-42") {
		switch ev.Type {
		case trajectory.EventTransition:
			walk = append(walk, string(ev.To))
		case trajectory.EventToolResultUnknown:
			unknown = string(ev.Data)
		case trajectory.EventToolResults:
			accepted = string(ev.Data)
		}
	}
	want := []string{"CALLING_MODEL", "WAITING_TOOL", "READY", "CALLING_MODEL", "READY"}
	if !slices.Equal(walk, want) {
		t.Errorf("states walked %v, want %v", walk, want)
	}
	if !strings.Contains(unknown, "toolu_forged") {
		t.Errorf("unknown result not audited: %q", unknown)
	}
	if !strings.Contains(accepted, ids[0]) || !strings.Contains(accepted, ids[1]) {
		t.Errorf("tool_results event %q should list %s accepted and %s unanswered", accepted, ids[0], ids[1])
	}
}

func TestEndedTrajectoryRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	rec := trajectory.New("done-1", "team-a", time.Now())
	if err := e.store.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Update(ctx, "done-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
		_, err := r.Finalize(trajectory.Canceled, "CANCELED", time.Now())
		return nil, err
	}); err != nil {
		t.Fatal(err)
	}
	other := trajectory.New("theirs", "team-b", time.Now())
	if err := e.store.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		status     int
		typ        string
	}{
		{"canceled", "/t/done-1/anthropic/v1/messages", 403, "trajectory_canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.do(t, "POST", tc.path, anthropicReq(false, "hi"), hdr()...)
			body := readAll(t, resp)
			if resp.StatusCode != tc.status || gjson.GetBytes(body, "error.type").String() != tc.typ {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
		})
	}
	if n := len(e.mock.Requests()); n != 0 {
		t.Fatalf("%d refused calls reached the provider", n)
	}
	// Another tenant's name is no refusal: the call runs in team-a's own
	// namespace, and team-b's record is untouched.
	resp := e.do(t, "POST", "/t/theirs/anthropic/v1/messages", anthropicReq(false, "hi"), hdr()...)
	if body := readAll(t, resp); resp.StatusCode != 200 || resp.Header.Get("X-Gatekeeper-Trajectory") != "theirs" {
		t.Fatalf("team-a naming team-b's run: %d %q %s", resp.StatusCode, resp.Header.Get("X-Gatekeeper-Trajectory"), body)
	}
	if got := e.record(t, "theirs"); got.State != trajectory.Ready || got.Turns != 0 || got.Tenant != "team-b" {
		t.Errorf("another tenant's record changed: %+v", got)
	}
	if got := e.record(t, trajectory.TenantScoped("theirs", "team-a")); got.Tenant != "team-a" || got.Turns != 1 {
		t.Errorf("team-a's own run: %+v", got)
	}
}

func TestUpstreamErrorPassesThroughAndIsRecorded(t *testing.T) {
	e := newEnv(t, envOpts{})
	turn := `{"kind":"http_error","status":429,"retry_after":"7s"}`
	resp := e.do(t, "POST", "/t/r-429/anthropic/v1/messages", anthropicReq(true, "hi"), hdr("X-Mock-Turn", turn)...)
	body := readAll(t, resp)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "7" {
		t.Fatalf("status %d retry-after %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if gjson.GetBytes(body, "error.type").String() != "rate_limit_error" {
		t.Errorf("upstream error body changed: %s", body)
	}
	var rec *trajectory.Record
	waitFor(t, "READY", func() bool {
		rec = e.record(t, "r-429")
		return rec.State == trajectory.Ready && rec.LastStopReason == "error"
	})
	if rec.Turns != 0 {
		t.Errorf("a refused call counted as a model turn: %d", rec.Turns)
	}
	found := false
	for _, ev := range e.events(t, "r-429") {
		found = found || ev.Type == trajectory.EventUpstreamError && strings.Contains(string(ev.Data), "429")
	}
	if !found {
		t.Error("no upstream_error event")
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.gk+"/t/gone/anthropic/v1/messages", strings.NewReader(anthropicReq(true, "long story")))
	for i := 0; i+1 < len(anthropicHdr); i += 2 {
		req.Header.Set(anthropicHdr[i], anthropicHdr[i+1])
	}
	req.Header.Set("X-Mock-Turn", `{"kind":"text","deltas":40,"event_delay":"100ms"}`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for i := 0; i < 3; i++ { // message_start, content_block_start, a first delta
		if _, err := readEvent(br); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "the provider to see the cancel", func() bool {
		rs := e.mock.Requests()
		return len(rs) == 1 && rs[0].Canceled
	})
	if n := len(e.mock.Requests()[0].EventTimes); n >= 40 {
		t.Errorf("the provider kept streaming after the agent left (%d events)", n)
	}
	var rec *trajectory.Record
	waitFor(t, "the turn to be recorded", func() bool { rec = e.record(t, "gone"); return rec.State == trajectory.Ready })
	if rec.LastStopReason != "canceled" || !rec.Spend.Estimated || rec.Spend.InputTokens == 0 || rec.Turns != 1 {
		t.Errorf("canceled turn recorded as stop %q spend %+v turns %d", rec.LastStopReason, rec.Spend, rec.Turns)
	}
}

func TestUpstreamResetAbortsClient(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, tc := range []struct{ name, path, body string }{
		{"anthropic", "/t/reset-a/anthropic/v1/messages", anthropicReq(true, "go")},
		{"chat", "/t/reset-c/openai/v1/chat/completions", `{"model":"gpt-4.1","stream":true,"messages":[{"role":"user","content":"go"}],"tools":[{"type":"function","function":{"name":"Bash","parameters":{"type":"object"}}}]}`},
		{"responses", "/t/reset-r/openai/v1/responses", `{"model":"gpt-4.1","stream":true,"input":"go","tools":[{"type":"function","name":"Bash","parameters":{"type":"object"}}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.do(t, "POST", tc.path, tc.body, "x-api-key", vkA, "Authorization", "Bearer "+vkA,
				"anthropic-version", "2023-06-01", "X-Mock-Turn", `{"kind":"disconnect"}`)
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err == nil {
				t.Fatalf("the stream ended cleanly after the provider reset it; the agent would take a half reply as success:\n%s", got)
			}
			if !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "unexpected EOF") {
				t.Logf("client read error: %v", err)
			}
			id := strings.TrimPrefix(tc.path, "/t/")
			id = id[:strings.Index(id, "/")]
			var rec *trajectory.Record
			waitFor(t, "READY", func() bool { rec = e.record(t, id); return rec.State == trajectory.Ready })
			if rec.LastStopReason != "error" || len(rec.Pending.ToolCalls) != 0 {
				t.Errorf("reset turn recorded as %q with pending %v", rec.LastStopReason, rec.Pending.ToolCalls)
			}
		})
	}
}

func TestParallelThreadsBecomeChildren(t *testing.T) {
	e := newEnv(t, envOpts{})
	slow := `{"kind":"text","deltas":10,"event_delay":"30ms"}`
	mk := func(system, prompt string) string {
		return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":512,"stream":true,"system":%q,"messages":[{"role":"user","content":%q}]}`, system, prompt)
	}
	bodies := []string{
		mk("You are the main agent.", "refactor the parser"),
		mk("You are an explore subagent.", "find the parser"),
		mk("Write a 5-word title.", "refactor the parser"),
		mk("You are an explore subagent.", "find the parser"), // same conversation twice at once: a sibling
	}
	var wg sync.WaitGroup
	ids := make([]string, len(bodies))
	for i, b := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := e.do(t, "POST", "/anthropic/v1/messages", b, hdr("X-Claude-Code-Session-Id", "session-7", "X-Mock-Turn", slow)...)
			readAll(t, resp)
			ids[i] = resp.Header.Get("X-Gatekeeper-Trajectory")
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" || seen[id] {
			t.Fatalf("threads share a record or have none: %v", ids)
		}
		seen[id] = true
	}
	root := ""
	for _, id := range ids {
		if !strings.ContainsAny(id, "/~") { // root/~2 is a sibling thread, a child of the root
			root = id
		}
	}
	if root == "" {
		t.Fatalf("no thread landed on the root record: %v", ids)
	}
	var rr *trajectory.Record
	for i := 0; ; i++ {
		rr = e.record(t, root)
		if rr.Spend.Turns == 4 {
			break
		}
		if i == 500 {
			t.Fatalf("root spend counts %d turns, want 4: ids %v, root %+v", rr.Spend.Turns, ids, rr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(rr.Children) != 3 {
		t.Errorf("root children %v, want 3", rr.Children)
	}
	for _, id := range ids {
		// A sibling serves the same conversation as the thread it forked from.
		if i := strings.Index(id, "~"); i > 0 {
			base := strings.TrimSuffix(id[:i], "/") // a sibling of the root is root/~N
			if a, b := e.record(t, base).Thread, e.record(t, id).Thread; a != b {
				t.Errorf("sibling %s serves %s, its base serves %s", id, b, a)
			}
		}
	}
	for _, id := range ids {
		rec := e.record(t, id)
		if id != root && !strings.HasPrefix(rec.ParentID, root) {
			t.Errorf("%s has parent %q", id, rec.ParentID)
		}
		if rec.Turns != 1 || rec.State != trajectory.Ready {
			t.Errorf("%s: turns %d state %s", id, rec.Turns, rec.State)
		}
	}
	// Spend of the root includes every child's.
	var sum int64
	for _, id := range ids {
		r := e.record(t, id)
		if id == root {
			continue
		}
		sum += r.Spend.OutputTokens
	}
	if own := rr.Spend.OutputTokens - sum; own <= 0 {
		t.Errorf("root output %d does not include the children's %d", rr.Spend.OutputTokens, sum)
	}
	// A second session is another trajectory.
	resp := e.do(t, "POST", "/anthropic/v1/messages", bodies[0], hdr("X-Claude-Code-Session-Id", "session-8")...)
	readAll(t, resp)
	if got := resp.Header.Get("X-Gatekeeper-Trajectory"); got == root || strings.HasPrefix(got, root+"/") {
		t.Errorf("another session landed in %s", got)
	}
}

func TestPerEventFlush(t *testing.T) {
	e := newEnv(t, envOpts{realClock: true})
	const n = 12
	resp := e.do(t, "POST", "/t/flush/anthropic/v1/messages", anthropicReq(true, "tick"),
		hdr("X-Mock-Turn", fmt.Sprintf(`{"kind":"text","deltas":%d,"event_delay":"40ms"}`, n))...)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var got []time.Time
	for {
		ev, err := readEvent(br)
		if strings.TrimSpace(ev) != "" {
			got = append(got, time.Now())
		}
		if err != nil {
			break
		}
	}
	sent := e.mock.Requests()[0].EventTimes
	if len(got) != len(sent) {
		t.Fatalf("received %d events, provider wrote %d", len(got), len(sent))
	}
	var worst time.Duration
	for i := range got {
		d := got[i].Sub(sent[i])
		worst = max(worst, d)
		// Each event must reach the agent before the provider writes the
		// next one (40 ms later): nothing is held back for batching.
		if i+1 < len(sent) && !got[i].Before(sent[i+1]) {
			t.Errorf("event %d reached the agent at %v, after the provider wrote event %d", i, got[i], i+1)
		}
	}
	t.Logf("%d events; worst upstream-write → agent-read delay %v", len(got), worst)
}

func TestNonStreamingTurnRecorded(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp := e.do(t, "POST", "/t/plain/openai/v1/chat/completions",
		`{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"Bash","parameters":{"type":"object"}}}]}`,
		"Authorization", "Bearer "+vkA, "X-Mock-Turn", `{"kind":"tool"}`, "Accept-Encoding", "gzip")
	body := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	id := gjson.GetBytes(body, "choices.0.message.tool_calls.0.id").String()
	var rec *trajectory.Record
	waitFor(t, "WAITING_TOOL", func() bool { rec = e.record(t, "plain"); return rec.State == trajectory.WaitingTool })
	if len(rec.Pending.ToolCalls) != 1 || rec.Pending.ToolCalls[0].ID != id {
		t.Fatalf("pending %+v, want %s", rec.Pending.ToolCalls, id)
	}
	if want := gjson.GetBytes(body, "usage.completion_tokens").Int(); rec.Spend.OutputTokens != want {
		t.Errorf("output tokens %d, want %d", rec.Spend.OutputTokens, want)
	}
	js, _ := json.Marshal(rec)
	if !gjson.ValidBytes(js) {
		t.Fatal("record JSON invalid")
	}
}

// TestAnswerAtOnceFindsThreadReady: an agent that sends its tool results
// the moment the reply ends must land on the same thread, with its results
// accepted, never on a forked sibling that has nothing pending.
func TestAnswerAtOnceFindsThreadReady(t *testing.T) {
	e := newEnv(t, envOpts{})
	for i := 0; i < 25; i++ {
		session := fmt.Sprintf("quick-%d", i)
		for _, stream := range []bool{true, false} {
			resp := e.do(t, "POST", "/anthropic/v1/messages", anthropicReq(stream, "run it"),
				hdr("X-Claude-Code-Session-Id", session, "Connection", "close", // the answer comes on a new connection
					"X-Mock-Turn", `{"kind":"tool","tools":[{"name":"Bash","input":{"command":"ls"}}]}`)...)
			body := readAll(t, resp)
			first := resp.Header.Get("X-Gatekeeper-Trajectory")
			id := gjson.GetBytes(body, "content.0.id").String()
			if stream {
				for _, ev := range sseEvents(body) {
					if d := ev[strings.Index(ev, "data:")+5:]; gjson.Get(d, "content_block.type").String() == "tool_use" {
						id = gjson.Get(d, "content_block.id").String()
					}
				}
			}
			next := fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":%t,"messages":[
{"role":"user","content":"run it"},
{"role":"assistant","content":[{"type":"tool_use","id":%q,"name":"Bash","input":{"command":"ls"}}]},
{"role":"user","content":[{"type":"tool_result","tool_use_id":%q,"content":"a.txt"}]}],
"tools":[{"name":"Bash","description":"run a command","input_schema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}]}`, stream, id, id)
			resp = e.do(t, "POST", "/anthropic/v1/messages", next, hdr("X-Claude-Code-Session-Id", session)...)
			readAll(t, resp)
			if got := resp.Header.Get("X-Gatekeeper-Trajectory"); got != first {
				t.Fatalf("round %d stream=%v: the answer landed on %s, the call was made on %s", i, stream, got, first)
			}
			for _, ev := range e.events(t, first) {
				if ev.Type == trajectory.EventToolResultUnknown {
					t.Fatalf("round %d: the result for the pending call %s was taken as unknown", i, id)
				}
			}
		}
	}
}

// TestRootServesOneConversation: once a conversation has claimed the
// trajectory's root record, another conversation of the same session gets
// its own child even when the root is idle, so two conversations never
// share one record's pending calls.
func TestRootServesOneConversation(t *testing.T) {
	e := newEnv(t, envOpts{})
	send := func(system string) string {
		body := fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":64,"system":%q,"messages":[{"role":"user","content":"go"}]}`, system)
		resp := e.do(t, "POST", "/anthropic/v1/messages", body, hdr("X-Claude-Code-Session-Id", "one-root")...)
		readAll(t, resp)
		return resp.Header.Get("X-Gatekeeper-Trajectory")
	}
	main1 := send("main agent")
	side := send("title writer")
	main2 := send("main agent")
	if main1 != main2 || strings.Contains(main1, "/") {
		t.Fatalf("the main conversation moved: %s then %s", main1, main2)
	}
	if side == main1 || !strings.HasPrefix(side, main1+"/") {
		t.Fatalf("another conversation landed on %s (root %s)", side, main1)
	}
}
