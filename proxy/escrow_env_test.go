package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"

	"gatekeeper/approvals"
	"gatekeeper/trajectory"
)

// gatesYAML gates destructive shell commands for team-a; extra is added
// to the gate (on_refusal, expiry, approvers).
func gatesYAML(approvers, extra string) string {
	if approvers == "" {
		approvers = "{roles: [secops], quorum: 1}"
	}
	return fmt.Sprintf(`
gates:
  - name: destructive-shell
    when: 'tool.name == "Bash" && tool.input.command.matches("rm -rf|DROP TABLE")'
    tenants: [team-a]
    approvers: %s
%s
approvals:
  keepalive: 20ms
`, approvers, extra)
}

// bashTurn is a mock turn: some text, then one Bash call with command.
// It applies to the first request only: the continuation after a refusal
// gets the mock's default "Done: ..." reply.
func bashTurn(command string) string {
	return fmt.Sprintf(`{"kind":"tool","first_only":true,"text":"I will clean the build directory now.","tools":[{"name":"Bash","input":{"command":%q}}]}`, command)
}

var bashTool = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "Bash", InputSchema: anthropic.ToolInputSchemaParam{
	Properties: map[string]any{"command": map[string]any{"type": "string"}}}}}

func bashParams(prompt string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1024,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
		Tools:    []anthropic.ToolUnionParam{bashTool}}
}

func antClient(base, key, spec string) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(base), aoption.WithAPIKey(key), aoption.WithMaxRetries(0),
		aoption.WithHeader("X-Mock-Turn", spec))
}

// antStream is an Anthropic SDK stream read in the background: each event
// is accumulated and passed on, so a test sees what arrived before a hold.
type antStream struct {
	events chan anthropic.MessageStreamEventUnion
	done   chan struct{}
	msg    anthropic.Message
	err    error
}

func startAntStream(ctx context.Context, c anthropic.Client, p anthropic.MessageNewParams) *antStream {
	a := &antStream{events: make(chan anthropic.MessageStreamEventUnion, 1024), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		s := c.Messages.NewStreaming(ctx, p)
		defer s.Close()
		for s.Next() {
			ev := s.Current()
			if err := a.msg.Accumulate(ev); err != nil {
				a.err = err
				return
			}
			a.events <- ev
		}
		a.err = s.Err()
	}()
	return a
}

// untilText reads events until a text delta arrived; it fails on a
// tool_use block or after 10 s.
func (a *antStream) untilText(t *testing.T) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-a.events:
			if ev.Type == "content_block_start" && ev.ContentBlock.Type == "tool_use" {
				t.Fatalf("a tool_use block reached the client while it should be held")
			}
			if ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" {
				return
			}
		case <-a.done:
			t.Fatalf("stream ended before its text: %v", a.err)
		case <-timeout:
			t.Fatal("no text within 10 s")
		}
	}
}

// wait waits (at most 20 s) for the stream's end.
func (a *antStream) wait(t *testing.T) anthropic.Message {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(20 * time.Second):
		t.Fatal("stream did not end within 20 s")
	}
	if a.err != nil {
		t.Fatalf("stream: %v", a.err)
	}
	return a.msg
}

// antCall is a non-streamed Messages.New running in the background.
type antCall struct {
	done chan struct{}
	msg  *anthropic.Message
	err  error
}

func startAntCall(ctx context.Context, c anthropic.Client, p anthropic.MessageNewParams) *antCall {
	a := &antCall{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.msg, a.err = c.Messages.New(ctx, p)
	}()
	return a
}

// wait waits (at most 20 s) for the call's reply.
func (a *antCall) wait(t *testing.T) anthropic.Message {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(20 * time.Second):
		t.Fatal("no reply")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	return *a.msg
}

// pending waits for n pending approval requests of trajectory id and
// returns them.
func (e *env) pending(t *testing.T, id string, n int) []*approvals.Request {
	t.Helper()
	var reqs []*approvals.Request
	waitFor(t, fmt.Sprintf("%d pending approval requests", n), func() bool {
		var err error
		reqs, err = e.apst.List(context.Background(), approvals.Filter{State: approvals.Pending, Trajectory: id, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(reqs) == n
	})
	return reqs
}

func (e *env) vote(t *testing.T, id, approver string, roles []string, approve bool) (*approvals.Request, error) {
	t.Helper()
	return e.svc.Vote(context.Background(), id, approvals.Vote{Approver: approver, Roles: roles, Approve: approve,
		Reason: "test", Via: approvals.ViaAdmin, At: e.clk.Now()})
}

// adminVote votes through the admin API with an approver's token and
// returns the status.
func (e *env) adminVote(t *testing.T, id, token, verb string) int {
	t.Helper()
	resp := e.do(t, "POST", "/admin/v1/approvals/"+id+"/"+verb, `{"reason":"checked"}`, "Authorization", "Bearer "+token)
	body := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Logf("vote %s %s: %d %s", verb, id, resp.StatusCode, body)
	}
	return resp.StatusCode
}

func (e *env) waitState(t *testing.T, id string, st trajectory.State) *trajectory.Record {
	t.Helper()
	var rec *trajectory.Record
	waitFor(t, "record "+id+" in "+string(st), func() bool { rec = e.record(t, id); return rec.State == st })
	return rec
}

// toolUses lists a message's tool_use blocks.
func toolUses(m anthropic.Message) []anthropic.ContentBlockUnion {
	var out []anthropic.ContentBlockUnion
	for _, b := range m.Content {
		if b.Type == "tool_use" {
			out = append(out, b)
		}
	}
	return out
}

func messageText(m anthropic.Message) string {
	var sb strings.Builder
	for _, b := range m.Content {
		if b.Type == "text" {
			sb.WriteString(b.Text)
		}
	}
	return sb.String()
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return mustJSONAny(va) == mustJSONAny(vb)
}

func mustJSONAny(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// turnRequests are the mock's recorded turn requests.
func (e *env) turnRequests() [][]byte {
	var out [][]byte
	for _, r := range e.mock.Requests() {
		if r.API != "" {
			out = append(out, r.Body)
		}
	}
	return out
}

// directUsage sends body, as the proxy sent it upstream, to the twin mock
// as the provider would be asked directly, and returns the streamed
// reply's usage.
func (e *env) directUsage(t *testing.T, body []byte, spec string) anthropic.Usage {
	t.Helper()
	c := antClient(e.twinURL, antKey, spec)
	s := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{}, aoption.WithRequestBody("application/json", body))
	defer s.Close()
	var m anthropic.Message
	for s.Next() {
		if err := m.Accumulate(s.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return m.Usage
}
