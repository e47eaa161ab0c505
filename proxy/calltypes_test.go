package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"gatekeeper/trajectory"
)

// callItemCase is one Responses output item type the agent executes: the
// name gates see, the scripted input, and the output item that answers it.
type callItemCase struct {
	item, name, input string
	output            func(callID string) string
}

var callItemCases = []callItemCase{
	{"local_shell_call", "local_shell", `{"type":"exec","command":["rm","-rf","build"],"env":{}}`, func(id string) string {
		return `{"type":"local_shell_call_output","id":` + mustJSONAny(id) + `,"output":"removed"}`
	}},
	{"shell_call", "shell", `{"commands":["rm -rf build"],"timeout_ms":1000}`, func(id string) string {
		return `{"type":"shell_call_output","call_id":` + mustJSONAny(id) +
			`,"output":[{"stdout":"","stderr":"","outcome":{"type":"exit","exit_code":0}}]}`
	}},
	{"apply_patch_call", "apply_patch", `{"type":"delete_file","path":"build/a.o"}`, func(id string) string {
		return `{"type":"apply_patch_call_output","call_id":` + mustJSONAny(id) + `,"status":"completed"}`
	}},
	{"computer_call", "computer", `{"type":"click","button":"left","x":1,"y":2}`, func(id string) string {
		return `{"type":"computer_call_output","call_id":` + mustJSONAny(id) +
			`,"output":{"type":"computer_screenshot","image_url":"data:image/png;base64,AA=="}}`
	}},
	{"foo_call", "foo_call", `{"verb":"frob"}`, func(id string) string {
		return `{"type":"foo_call_output","call_id":` + mustJSONAny(id) + `,"output":"frobbed"}`
	}},
}

// callItemGates gates every client call item type for team-a.
const callItemGates = `
gates:
  - name: client-calls
    when: 'tool.name in ["local_shell", "shell", "apply_patch", "computer", "foo_call"]'
    tenants: [team-a]
    approvers: {roles: [secops], quorum: 1}
  - name: searches
    when: 'tool.name == "web_search"'
    tenants: [team-a]
    approvers: {roles: [secops], quorum: 1}
approvals:
  keepalive: 20ms
`

// itemTurn is a mock turn: some text, then one output item.
func itemTurn(item, input string, firstOnly bool) string {
	return fmt.Sprintf(`{"kind":"tool","first_only":%t,"text":"Working on it.","tools":[{"item":%q,"input":%s}]}`, firstOnly, item, input)
}

func itemParams() responses.ResponseNewParams {
	return responses.ResponseNewParams{Model: "gpt-5-codex", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("clean up")},
		Tools: []responses.ToolUnionParam{{OfLocalShell: &responses.ToolLocalShellParam{}}}}
}

// responsesCall runs one Responses turn with the SDK, streamed or not, and
// returns the final Response.
func responsesCall(ctx context.Context, c openai.Client, p responses.ResponseNewParams, stream bool) (*responses.Response, error) {
	if !stream {
		return c.Responses.New(ctx, p)
	}
	s := c.Responses.NewStreaming(ctx, p)
	defer s.Close()
	var final *responses.Response
	for s.Next() {
		switch ev := s.Current(); ev.Type {
		case "response.completed", "response.incomplete", "response.failed":
			r := ev.Response
			final = &r
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if final == nil {
		return nil, fmt.Errorf("no terminal event")
	}
	return final, nil
}

// startResponsesCall runs responsesCall in the background.
func startResponsesCall(ctx context.Context, c openai.Client, p responses.ResponseNewParams, stream bool) func(t *testing.T) *responses.Response {
	type result struct {
		r   *responses.Response
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := responsesCall(ctx, c, p, stream)
		done <- result{r, err}
	}()
	return func(t *testing.T) *responses.Response {
		t.Helper()
		select {
		case res := <-done:
			if res.err != nil {
				t.Fatal(res.err)
			}
			return res.r
		case <-time.After(20 * time.Second):
			t.Fatal("no reply")
		}
		return nil
	}
}

// itemsOf returns the output items of type typ.
func itemsOf(r *responses.Response, typ string) []responses.ResponseOutputItemUnion {
	var out []responses.ResponseOutputItemUnion
	for _, it := range r.Output {
		if it.Type == typ {
			out = append(out, it)
		}
	}
	return out
}

func streamName(stream bool) string {
	if stream {
		return "stream"
	}
	return "json"
}

// Each client call item is held by a gate that matches its name, released
// on approval and then pending until the next request carries its output
// item; or, denied, answered by a continuation with the output item of its
// type.
func TestCallItemsHeldByGate(t *testing.T) {
	for _, tc := range callItemCases {
		for _, stream := range []bool{false, true} {
			t.Run(tc.item+"/"+streamName(stream)+"/approve", func(t *testing.T) {
				e := newEnv(t, envOpts{limits: callItemGates})
				id := "items-" + strings.ReplaceAll(tc.name, "_", "-")
				c := oaiClient(e.gk+"/t/"+id+"/openai/v1", vkA, itemTurn(tc.item, tc.input, true))
				wait := startResponsesCall(ctxT(t), c, itemParams(), stream)
				r := e.pending(t, id, 1)[0]
				e.waitState(t, id, trajectory.AwaitingApproval)
				if r.Call.Name != tc.name {
					t.Fatalf("gate saw %q, want %q", r.Call.Name, tc.name)
				}
				got := r.Call.Input
				if tc.item == "foo_call" {
					// An unknown call's input is its whole item.
					if gjson.GetBytes(got, "type").Str != "foo_call" {
						t.Errorf("gate saw input %s, want the whole item", got)
					}
					got = []byte(gjson.GetBytes(got, "action").Raw)
				}
				if !jsonEqual(t, got, []byte(tc.input)) {
					t.Fatalf("gate saw input %s, want %s", r.Call.Input, tc.input)
				}
				if _, err := e.vote(t, r.ID, "carol", []string{"secops"}, true); err != nil {
					t.Fatal(err)
				}
				final := wait(t)
				items := itemsOf(final, tc.item)
				if len(items) != 1 || items[0].CallID != r.CallID {
					t.Fatalf("released output %s", mustJSON(t, final.Output))
				}
				rec := e.waitState(t, id, trajectory.WaitingTool)
				if len(rec.Pending.ToolCalls) != 1 || rec.Pending.ToolCalls[0].ID != r.CallID || rec.Pending.ToolCalls[0].Name != tc.name {
					t.Fatalf("pending %+v", rec.Pending.ToolCalls)
				}

				// The next request carries the output item: the record takes
				// it as the call's result.
				p := itemParams()
				p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
					responses.ResponseInputItemParamOfMessage("clean up", responses.EasyInputMessageRoleUser),
					param.Override[responses.ResponseInputItemUnionParam](json.RawMessage(items[0].RawJSON())),
					param.Override[responses.ResponseInputItemUnionParam](json.RawMessage(tc.output(r.CallID))),
				}}
				if _, err := responsesCall(ctxT(t), c, p, stream); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the results accepted", func() bool {
					for _, m := range e.eventsOf(t, id, trajectory.EventToolResults) {
						if mustJSONAny(m["accepted"]) == mustJSONAny([]string{r.CallID}) && m["unanswered"] == nil {
							return true
						}
					}
					return false
				})
				e.waitState(t, id, trajectory.Ready)
			})
			t.Run(tc.item+"/"+streamName(stream)+"/deny", func(t *testing.T) {
				e := newEnv(t, envOpts{limits: callItemGates})
				id := "items-deny"
				c := oaiClient(e.gk+"/t/"+id+"/openai/v1", vkA, itemTurn(tc.item, tc.input, true))
				wait := startResponsesCall(ctxT(t), c, itemParams(), stream)
				r := e.pending(t, id, 1)[0]
				if _, err := e.vote(t, r.ID, "carol", []string{"secops"}, false); err != nil {
					t.Fatal(err)
				}
				final := wait(t)
				if items := itemsOf(final, tc.item); len(items) != 0 {
					t.Fatalf("a denied call reached the agent: %s", mustJSON(t, final.Output))
				}
				// A computer action's refusal ends with a user message, which the
				// mock answers with the scripted turn again: it may be refused
				// once more.
				bodies := e.turnRequests()
				if len(bodies) < 2 || tc.item != "computer_call" && len(bodies) != 2 {
					t.Fatalf("%d requests upstream, want the turn and its continuation", len(bodies))
				}
				var answer gjson.Result
				for _, it := range gjson.GetBytes(bodies[1], "input").Array() {
					if it.Get("type").Str == tc.item+"_output" {
						answer = it
					}
				}
				idKey := "call_id"
				if tc.item == "local_shell_call" {
					idKey = "id"
				}
				if answer.Get(idKey).Str != r.CallID || !strings.Contains(string(bodies[1]), "denied") {
					t.Fatalf("continuation answers the call with %s", answer.Raw)
				}
				rec := e.waitState(t, id, trajectory.Ready)
				if len(rec.Pending.ToolCalls) != 0 {
					t.Errorf("pending after denial: %+v", rec.Pending.ToolCalls)
				}
			})
		}
	}
}

// At the restrict stage every client call item is withheld: none is a
// read-only tool, and the unknown foo_call could not be one.
func TestCallItemsWithheldAtRestrict(t *testing.T) {
	for _, tc := range callItemCases {
		for _, stream := range []bool{false, true} {
			t.Run(tc.item+"/"+streamName(stream), func(t *testing.T) {
				e := newEnv(t, envOpts{})
				e.seed(t, "narrow", 10, 9.3)
				c := oaiClient(e.gk+"/t/narrow/openai/v1", vkA, itemTurn(tc.item, tc.input, false))
				final, err := responsesCall(ctxT(t), c, itemParams(), stream)
				if err != nil {
					t.Fatal(err)
				}
				if items := itemsOf(final, tc.item); len(items) != 0 {
					t.Fatalf("the agent received %s", mustJSON(t, items))
				}
				if !strings.Contains(final.OutputText(), "The call to "+tc.name+" was withheld") {
					t.Errorf("text %q does not say the call was withheld", final.OutputText())
				}
				var rec *trajectory.Record
				waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "narrow"); return rec.Turns == 1 })
				if rec.State != trajectory.Ready || len(rec.Pending.ToolCalls) != 0 {
					t.Errorf("record %s pending %v", rec.State, rec.Pending.ToolCalls)
				}
			})
		}
	}
}

// A grant covers the call items it names, but never an unknown one, even
// by its type name.
func TestCallItemsGrantAtRestrict(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(streamName(stream), func(t *testing.T) {
			e := newEnv(t, envOpts{readOnly: "[local_shell, foo_call]"})
			e.seed(t, "granted", 10, 9.3)
			spec := `{"kind":"tool","tools":[{"item":"local_shell_call","input":{"type":"exec","command":["ls"],"env":{}}},` +
				`{"item":"foo_call","input":{"verb":"frob"}}]}`
			c := oaiClient(e.gk+"/t/granted/openai/v1", vkA, spec)
			final, err := responsesCall(ctxT(t), c, itemParams(), stream)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(itemsOf(final, "local_shell_call")); n != 1 {
				t.Errorf("granted local_shell calls delivered: %d", n)
			}
			if items := itemsOf(final, "foo_call"); len(items) != 0 {
				t.Errorf("the unknown call was delivered: %s", mustJSON(t, items))
			}
			if !strings.Contains(final.OutputText(), "The call to foo_call was withheld") {
				t.Errorf("text %q", final.OutputText())
			}
		})
	}
}

// A hosted web search is recorded with the turn and never gated, even by
// a gate naming it.
func TestHostedCallRecordedNotGated(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(streamName(stream), func(t *testing.T) {
			e := newEnv(t, envOpts{limits: callItemGates})
			c := oaiClient(e.gk+"/t/search/openai/v1", vkA, itemTurn("web_search_call", `{"type":"search","query":"gatekeeper"}`, false))
			final, err := responsesCall(ctxT(t), c, itemParams(), stream)
			if err != nil {
				t.Fatal(err)
			}
			if items := itemsOf(final, "web_search_call"); len(items) != 1 {
				t.Fatalf("output %s", mustJSON(t, final.Output))
			}
			var rec *trajectory.Record
			waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "search"); return rec.Turns == 1 })
			if rec.State != trajectory.Ready || len(rec.Pending.ToolCalls) != 0 {
				t.Errorf("record %s pending %v", rec.State, rec.Pending.ToolCalls)
			}
			if n := len(e.pending(t, "search", 0)); n != 0 {
				t.Errorf("%d approval requests", n)
			}
			turns := e.eventsOf(t, "search", trajectory.EventTurn)
			if len(turns) != 1 {
				t.Fatalf("%d turn events", len(turns))
			}
			hosted, _ := turns[0]["hosted_calls"].([]any)
			if len(hosted) != 1 || !slices.Contains([]string{mustJSONAny(hosted[0])}, mustJSONAny(map[string]string{"id": final.Output[1].ID, "name": "web_search"})) {
				t.Errorf("turn event hosted_calls %v", turns[0]["hosted_calls"])
			}
		})
	}
}

// tenants[].refuse_ungated_mcp refuses a hosted MCP tool that never asks
// for approval, before anything reaches the provider.
func TestRefuseUngatedMCP(t *testing.T) {
	never := responses.ToolMcpRequireApprovalUnionParam{OfMcpToolApprovalSetting: openai.String("never")}
	always := responses.ToolMcpRequireApprovalUnionParam{OfMcpToolApprovalSetting: openai.String("always")}
	someNever := responses.ToolMcpRequireApprovalUnionParam{OfMcpToolApprovalFilter: &responses.ToolMcpRequireApprovalMcpToolApprovalFilterParam{
		Never: responses.ToolMcpRequireApprovalMcpToolApprovalFilterNeverParam{ToolNames: []string{"search"}}}}
	tests := []struct {
		name    string
		on      bool
		approve responses.ToolMcpRequireApprovalUnionParam
		refused bool
	}{
		{"never refused", true, never, true},
		{"a never list refused", true, someNever, true},
		{"always passes", true, always, false},
		{"switch off: never passes", false, never, false},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(tt.name+"/"+streamName(stream), func(t *testing.T) {
				o := envOpts{}
				if tt.on {
					o.teamAExtra = "    refuse_ungated_mcp: true"
				}
				e := newEnv(t, o)
				p := itemParams()
				p.Tools = append(p.Tools, responses.ToolUnionParam{OfMcp: &responses.ToolMcpParam{ServerLabel: "docs",
					ServerURL: openai.String("https://mcp.example/sse"), RequireApproval: tt.approve}})
				_, err := responsesCall(ctxT(t), oaiClient(e.gk+"/t/mcp/openai/v1", vkA, `{"kind":"text","text":"ok"}`), p, stream)
				if !tt.refused {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				checkRefused(t, e, err)

				// Declared in an additional_tools input item instead.
				p = itemParams()
				p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
					responses.ResponseInputItemParamOfMessage("clean up", responses.EasyInputMessageRoleUser),
					param.Override[responses.ResponseInputItemUnionParam](json.RawMessage(
						`{"type":"additional_tools","tools":[{"type":"mcp","server_label":"docs","server_url":"https://mcp.example/sse","require_approval":` +
							mustJSONAny(tt.approve) + `}]}`)),
				}}
				_, err = responsesCall(ctxT(t), oaiClient(e.gk+"/t/mcp/openai/v1", vkA, `{"kind":"text","text":"ok"}`), p, stream)
				checkRefused(t, e, err)
			})
		}
	}
}

// checkRefused checks that err is the 400 naming refuse_ungated_mcp and
// that nothing reached the provider.
func checkRefused(t *testing.T, e *env, err error) {
	t.Helper()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "tenants[].refuse_ungated_mcp") ||
		apiErr.Type != "invalid_request_error" {
		t.Fatalf("error %v, want a 400 naming the switch", err)
	}
	if n := len(e.turnRequests()); n != 0 {
		t.Errorf("%d requests reached the provider", n)
	}
}
