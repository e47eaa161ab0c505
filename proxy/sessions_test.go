package proxy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"gatekeeper/approvals"
	"gatekeeper/proxy"
	"gatekeeper/trajectory"
)

// sessionTurn is one non-streamed Messages turn through gatekeeper at
// path: the run the reply names and the reply's content.
type sessionTurn struct {
	status  int
	run     string
	content json.RawMessage
	errType string
}

// antTurn sends messages (a JSON array) as a non-streamed Messages turn
// that names no session, the mock answering with spec.
func antTurn(t *testing.T, base, messages, spec string, extra ...string) sessionTurn {
	t.Helper()
	body := `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":` + messages + `,
	 "tools":[{"name":"Bash","description":"run a command","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}]}`
	req, err := http.NewRequestWithContext(ctxT(t), "POST", base+"/anthropic/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	h := hdr(append([]string{"X-Mock-Turn", spec}, extra...)...)
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b := readAll(t, resp)
	var m struct {
		Content json.RawMessage `json:"content"`
		Error   struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("reply %d %s: %v", resp.StatusCode, b, err)
	}
	return sessionTurn{status: resp.StatusCode, run: resp.Header.Get("X-Gatekeeper-Trajectory"), content: m.Content, errType: m.Error.Type}
}

// firstMessages is a conversation's first turn: one user prompt.
func firstMessages(prompt string) string {
	return fmt.Sprintf(`[{"role":"user","content":%q}]`, prompt)
}

// nextMessages is the turn after first: prompt, the reply as the agent
// replays it, and a result for each of its tool calls.
func nextMessages(t *testing.T, prompt string, first sessionTurn) string {
	t.Helper()
	var blocks []struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	}
	if err := json.Unmarshal(first.content, &blocks); err != nil {
		t.Fatal(err)
	}
	var results []string
	for _, b := range blocks {
		if b.Type == "tool_use" {
			results = append(results, fmt.Sprintf(`{"type":"tool_result","tool_use_id":%q,"content":"ok"}`, b.ID))
		}
	}
	if len(results) == 0 {
		t.Fatalf("the first reply has no tool call: %s", first.content)
	}
	return fmt.Sprintf(`[{"role":"user","content":%q},{"role":"assistant","content":%s},{"role":"user","content":[%s]}]`,
		prompt, first.content, strings.Join(results, ","))
}

const lsTurn = `{"kind":"tool","first_only":true,"text":"Listing.","tools":[{"name":"Bash","input":{"command":"ls"}}]}`

// Two sessions that name none and begin with the same prompt are two
// runs; each later turn, which replays its own first reply, joins its
// own run, through another gatekeeper on the same store too (a replica,
// or this one restarted: the link is the store's).
func TestSessionsSamePromptTwoRuns(t *testing.T) {
	e := newEnv(t, envOpts{})
	const prompt = "list the files"
	a1 := antTurn(t, e.gk, firstMessages(prompt), lsTurn)
	b1 := antTurn(t, e.gk, firstMessages(prompt), lsTurn)
	if a1.status != 200 || b1.status != 200 || a1.run == "" || a1.run == b1.run {
		t.Fatalf("two sessions with one first prompt: %d %q and %d %q, want 200s on two runs", a1.status, a1.run, b1.status, b1.run)
	}
	a2 := antTurn(t, e.gk, nextMessages(t, prompt, a1), `{"kind":"text","text":"done"}`)
	if a2.status != 200 || a2.run != a1.run {
		t.Fatalf("session A's second turn went to %q (%d), want its run %q", a2.run, a2.status, a1.run)
	}

	// Another gatekeeper on the same store: nothing of session B is in
	// its memory.
	px, err := proxy.New(proxy.Options{Config: e.cfg, Store: e.store, Clock: e.clk.Now, Ledger: e.ledger})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	px.Routes(r)
	other := httptest.NewServer(r)
	defer other.Close()
	b2 := antTurn(t, other.URL, nextMessages(t, prompt, b1), `{"kind":"text","text":"done"}`)
	if b2.status != 200 || b2.run != b1.run {
		t.Fatalf("session B's second turn, on another replica, went to %q (%d), want its run %q", b2.run, b2.status, b1.run)
	}
	for _, run := range []string{a1.run, b1.run} {
		if rec := e.record(t, run); rec.Turns != 2 {
			t.Errorf("run %s has %d turns, want 2 (its session's own)", run, rec.Turns)
		}
	}
}

// A call an approver denied in one session never refuses the identical
// call of another session that began with the same prompt: that call is
// asked anew, and approved, it reaches its agent.
func TestSessionsDenialStaysInItsRun(t *testing.T) {
	e := newEnv(t, envOpts{limits: gatesYAML("", "")})
	spec := bashTurn("rm -rf ./build")
	params := bashParams("clean the build")

	a := startAntStream(ctxT(t), antClient(e.gk+"/anthropic", vkA, spec), params)
	a.untilText(t)
	ra := e.pendingAny(t, 1)[0]
	if code := e.adminVote(t, ra.ID, carolToken, "deny"); code != 200 {
		t.Fatalf("deny: %d", code)
	}
	if uses := toolUses(a.wait(t)); len(uses) != 0 {
		t.Fatalf("session A got the denied call: %+v", uses)
	}

	b := startAntStream(ctxT(t), antClient(e.gk+"/anthropic", vkA, spec), params)
	b.untilText(t)
	rb := e.pendingAny(t, 1)[0]
	if rb.Trajectory == ra.Trajectory || rb.State != approvals.Pending {
		t.Fatalf("session B's call: request %s of run %s in state %s; session A's was %s of run %s: want B asked on its own run",
			rb.ID, rb.Trajectory, rb.State, ra.ID, ra.Trajectory)
	}
	if code := e.adminVote(t, rb.ID, carolToken, "approve"); code != 200 {
		t.Fatalf("approve: %d", code)
	}
	if uses := toolUses(b.wait(t)); len(uses) != 1 || uses[0].ID != rb.CallID {
		t.Fatalf("session B got calls %+v, want its approved call %s", uses, rb.CallID)
	}
}

// pendingAny waits for n pending approval requests of any run.
func (e *env) pendingAny(t *testing.T, n int) []*approvals.Request {
	t.Helper()
	var reqs []*approvals.Request
	waitFor(t, fmt.Sprintf("%d pending approval requests", n), func() bool {
		var err error
		reqs, err = e.apst.List(ctxT(t), approvals.Filter{State: approvals.Pending, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(reqs) == n
	})
	return reqs
}

// A run that failed its budget answers its own session 402, never a new
// session that begins with the same prompt.
func TestSessionsFailedRunBlocksNoNewSession(t *testing.T) {
	e := newEnv(t, envOpts{})
	const prompt = "list the files"
	a1 := antTurn(t, e.gk, firstMessages(prompt), lsTurn)
	if a1.status != 200 {
		t.Fatalf("first turn: %d", a1.status)
	}
	if _, err := e.store.Update(ctxT(t), a1.run, func(r *trajectory.Record) ([]trajectory.Event, error) {
		r.Budget.Turns = 1
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	a2 := antTurn(t, e.gk, nextMessages(t, prompt, a1), `{"kind":"text","text":"done"}`)
	if a2.status != http.StatusPaymentRequired || a2.run != "" && a2.run != a1.run {
		t.Fatalf("session A past its budget: %d on %q, want 402", a2.status, a2.run)
	}
	if st := e.record(t, a1.run).State; st != trajectory.Failed {
		t.Fatalf("session A's run is %s, want FAILED", st)
	}
	b1 := antTurn(t, e.gk, firstMessages(prompt), lsTurn)
	if b1.status != 200 || b1.run == a1.run {
		t.Fatalf("a new session with the same prompt: %d on %q (%s), want 200 on a new run", b1.status, b1.run, b1.errType)
	}
}

// Every session signal a real agent sends puts a session's turns in one
// run, whatever their conversations: the headers, Chat's and Responses'
// prompt_cache_key, the Responses conversation, and the session part of
// Anthropic's metadata.user_id in both of Claude Code's forms. Another
// session id is another run.
func TestSessionsSignals(t *testing.T) {
	e := newEnv(t, envOpts{})
	text := `{"kind":"text","text":"ok"}`
	// ant's prompt differs with meta's length: another conversation.
	ant := func(meta string, h ...string) string {
		body := `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"p` + fmt.Sprint(len(meta)) + `"}]` + meta + `}`
		resp := e.do(t, "POST", "/anthropic/v1/messages", body, hdr(append([]string{"X-Mock-Turn", text}, h...)...)...)
		readAll(t, resp)
		return runOf(resp)
	}
	oai := func(path, body string) string {
		resp := e.do(t, "POST", path, body, "Authorization", "Bearer "+vkA, "Content-Type", "application/json", "X-Mock-Turn", text)
		readAll(t, resp)
		return runOf(resp)
	}
	chat := func(key, prompt string) string {
		return oai("/openai/v1/chat/completions", `{"model":"gpt-4.1","prompt_cache_key":"`+key+`","messages":[{"role":"user","content":"`+prompt+`"}]}`)
	}
	resp := func(member, prompt string) string {
		return oai("/openai/v1/responses", `{"model":"gpt-4.1",`+member+`,"input":"`+prompt+`"}`)
	}
	uid := func(v string) string { b, _ := json.Marshal(v); return `,"metadata":{"user_id":` + string(b) + `}` }
	for _, tc := range []struct {
		name             string
		one, two, others func() string
	}{
		{"x-session-id",
			func() string { return ant("", "X-Session-Id", "ses_1") }, func() string { return ant(",\"system\":\"s\"", "X-Session-Id", "ses_1") },
			func() string { return ant("", "X-Session-Id", "ses_2") }},
		{"x-session-affinity",
			func() string { return ant("", "X-Session-Affinity", "ses_3") }, func() string { return ant(",\"system\":\"s\"", "X-Session-Affinity", "ses_3") },
			func() string { return ant("", "X-Session-Affinity", "ses_4") }},
		{"chat prompt_cache_key",
			func() string { return chat("ses_5", "a") }, func() string { return chat("ses_5", "b") },
			func() string { return chat("ses_6", "a") }},
		{"responses prompt_cache_key",
			func() string { return resp(`"prompt_cache_key":"ses_7"`, "a") }, func() string { return resp(`"prompt_cache_key":"ses_7"`, "b") },
			func() string { return resp(`"prompt_cache_key":"ses_8"`, "a") }},
		{"responses conversation",
			func() string { return resp(`"conversation":"conv_1"`, "a") }, func() string { return resp(`"conversation":{"id":"conv_1"}`, "b") },
			func() string { return resp(`"conversation":"conv_2"`, "a") }},
		{"metadata.user_id, older form",
			func() string { return ant(uid("user_ab_account_cd_session_s9")) }, func() string { return ant(uid("user_ef_account__session_s9") + " ") },
			func() string { return ant(uid("user_ab_account_cd_session_s10")) }},
		{"metadata.user_id holding JSON",
			func() string { return ant(uid(`{"device_id":"d","session_id":"s11"}`)) }, func() string { return ant(uid(`{"device_id":"e","session_id":"s11"}`) + " ") },
			func() string { return ant(uid(`{"device_id":"d","session_id":"s12"}`)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			one, two, other := tc.one(), tc.two(), tc.others()
			// Two conversations of one session are two threads of its run.
			if one == "" || one != two || one == other {
				t.Fatalf("runs %q, %q (same session) and %q (another): want the first two equal, the third apart", one, two, other)
			}
		})
	}
	// Without any signal, each first turn is a run of its own, even with
	// one user_id naming a user.
	if a, b := ant(uid("alice")), ant(uid("alice")); a == "" || a == b {
		t.Fatalf("two first turns naming no session: runs %q and %q, want two", a, b)
	}
}

// runOf is the run a reply names: the root of its thread record.
func runOf(resp *http.Response) string {
	run, _, _ := strings.Cut(resp.Header.Get("X-Gatekeeper-Trajectory"), "/")
	return run
}

// respTurn sends input (a JSON array) as a Responses turn that names no
// session, the mock answering with spec: the run the reply names and the
// reply's output items.
func respTurn(t *testing.T, base, input, spec string, stream bool) (run string, output json.RawMessage) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"gpt-4.1","instructions":"Keep it tidy.","include":[],"stream":%t,"input":%s,
	 "tools":[{"type":"function","name":"run_command","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}]}`, stream, input)
	req, err := http.NewRequestWithContext(ctxT(t), "POST", base+"/openai/v1/responses", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"Authorization": "Bearer " + vkA, "Content-Type": "application/json", "X-Mock-Turn": spec} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("reply %d: %s", resp.StatusCode, b)
	}
	var m struct {
		Output json.RawMessage `json:"output"`
	}
	if !stream {
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("reply %s: %v", b, err)
		}
	}
	return resp.Header.Get("X-Gatekeeper-Trajectory"), m.Output
}

// A Responses conversation that names no session and keeps its history
// itself (the OpenAI Agents SDK's default) replays the first reply's
// output items, a message before the call among them: its later turn
// joins the run of its first.
func TestSessionsResponsesReplayJoinsItsRun(t *testing.T) {
	e := newEnv(t, envOpts{})
	const user = `{"role":"user","content":"list the files"}`
	const turn = `{"kind":"tool","first_only":true,"text":"Listing.","tools":[{"name":"run_command","input":{"command":"ls"}}]}`
	run1, out := respTurn(t, e.gk, "["+user+"]", turn, false)
	var items []struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
	}
	if err := json.Unmarshal(out, &items); err != nil {
		t.Fatal(err)
	}
	var results []string
	for _, it := range items {
		if it.Type == "function_call" {
			results = append(results, fmt.Sprintf(`{"type":"function_call_output","call_id":%q,"output":"ok"}`, it.CallID))
		}
	}
	if len(results) == 0 {
		t.Fatalf("the first reply has no call: %s", out)
	}
	next := "[" + user + "," + strings.Trim(string(out), "[]") + "," + strings.Join(results, ",") + "]"
	run2, _ := respTurn(t, e.gk, next, `{"kind":"text","text":"done"}`, false)
	if run1 == "" || run2 != run1 {
		t.Fatalf("the later turn went to run %q, want its first turn's %q", run2, run1)
	}
}
