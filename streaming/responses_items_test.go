package streaming_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
)

// clientCallNames are the names the client calls of client-call-items.sse
// go by.
var clientCallNames = []string{"local_shell", "shell", "apply_patch", "computer", "foo_call"}

// callNames lists the names of a Result's calls, client calls only or all.
func callNames(res *streaming.Result, client bool) []string {
	var names []string
	for _, tc := range res.ToolCalls {
		if !client || !tc.Server {
			names = append(names, tc.Name)
		}
	}
	return names
}

// TestCallItemsFilter runs the client call items through the call filter,
// streamed and whole, with and without Hold: a refused item is replaced by
// a message, the hosted web search always passes, and a grant never
// covers the unknown foo_call, whatever its name.
func TestCallItemsFilter(t *testing.T) {
	stream := fixturetest.ReadFile(t, "responses/testdata", "client-call-items.sse")
	whole, err := dialects[streaming.APIResponses].AssembleJSON(stream)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		allow func(string) bool
		grant bool
		want  []string // the client calls delivered
	}{
		{"allow all", allowAll, false, clientCallNames},
		{"grant allowing all but foo_call", allowAll, true, clientCallNames[:4]},
		{"grant naming foo_call", refuseNames("local_shell", "shell", "apply_patch", "computer"), true, nil},
		{"refuse shell and computer", refuseNames("shell", "computer"), false, []string{"local_shell", "apply_patch", "foo_call"}},
		{"refuse all", refuseAll, false, nil},
	}
	for _, tt := range tests {
		for _, hold := range []bool{false, true} {
			name := tt.name
			if hold {
				name += "/hold"
			}
			t.Run(name, func(t *testing.T) {
				f := newTestFilter(t, streaming.APIResponses, tt.allow)
				if tt.grant {
					f.Grant()
				}
				if hold {
					f.Hold()
				}
				out := filterChunks(t, f, stream)
				res, _ := mustDecode(t, streaming.APIResponses, out)
				if got := callNames(res, true); !slices.Equal(got, tt.want) {
					t.Errorf("delivered client calls %v, want %v", got, tt.want)
				}
				if !slices.Contains(callNames(res, false), "web_search") {
					t.Error("the hosted web search was not delivered")
				}
				var refused []string
				for _, tc := range f.Refused() {
					refused = append(refused, tc.Name)
					if !strings.Contains(string(out), filterRefusal(tc)) {
						t.Errorf("no refusal for %s in the output", tc.Name)
					}
				}
				wantRefused := slices.DeleteFunc(slices.Clone(clientCallNames), func(n string) bool { return slices.Contains(tt.want, n) })
				if !slices.Equal(refused, wantRefused) {
					t.Errorf("refused %v, want %v", refused, wantRefused)
				}
				checkSequenceNumbers(t, stream, out)

				body := newTestFilter(t, streaming.APIResponses, tt.allow)
				if tt.grant {
					body.Grant()
				}
				outBody, err := body.Body(whole)
				if err != nil {
					t.Fatal(err)
				}
				resBody, err := dialects[streaming.APIResponses].DecodeJSON(outBody)
				if err != nil {
					t.Fatal(err)
				}
				if got := callNames(resBody, true); !slices.Equal(got, tt.want) {
					t.Errorf("body: delivered client calls %v, want %v", got, tt.want)
				}
			})
		}
	}
}

// TestCallItemsContinuation answers each refused client call item with
// the output item of its own type.
func TestCallItemsContinuation(t *testing.T) {
	stream := fixturetest.ReadFile(t, "responses/testdata", "client-call-items.sse")
	req := []byte(`{"model":"gpt-5-codex","input":[{"role":"user","content":"clean up"}],"stream":true}`)
	out, err := dialects[streaming.APIResponses].Continuation(req, stream, true, map[string][]byte{"": []byte("refused: not approved")})
	if err != nil {
		t.Fatal(err)
	}
	input := gjson.GetBytes(out, "input").Array()
	var answers []gjson.Result
	for _, it := range input {
		if strings.HasSuffix(it.Get("type").Str, "_output") || it.Get("role").Str == "user" && it.Get("content").IsArray() {
			answers = append(answers, it)
		}
	}
	want := []struct{ typ, idKey, id, text string }{
		{"local_shell_call_output", "id", "call_ls1", "output"},
		{"shell_call_output", "call_id", "call_sh1", "output.0.stderr"},
		{"apply_patch_call_output", "call_id", "call_ap1", "output"},
		{"computer_call_output", "call_id", "call_cu1", ""},
		{"", "", "", "content.0.text"}, // the computer action's refusal, as a user message
		{"foo_call_output", "call_id", "call_foo1", "output"},
	}
	if len(answers) != len(want) {
		t.Fatalf("answers = %v", answers)
	}
	for i, w := range want {
		a := answers[i]
		if a.Get("type").Str != w.typ && !(w.typ == "" && a.Get("type").Str == "message") {
			t.Errorf("answer %d type %q, want %q", i, a.Get("type").Str, w.typ)
		}
		if w.idKey != "" && a.Get(w.idKey).Str != w.id {
			t.Errorf("answer %d %s = %q, want %q", i, w.idKey, a.Get(w.idKey).Str, w.id)
		}
		if w.text != "" && a.Get(w.text).Str != "refused: not approved" {
			t.Errorf("answer %d %s = %q", i, w.text, a.Get(w.text).Str)
		}
	}
	if got := answers[2].Get("status").Str; got != "failed" {
		t.Errorf("apply_patch_call_output status %q", got)
	}
	if got := answers[3].Get("output.type").Str; got != "computer_screenshot" {
		t.Errorf("computer_call_output output %s", answers[3].Get("output").Raw)
	}
	// The web search is replayed with the output, never answered.
	for _, it := range input {
		if it.Get("type").Str == "web_search_call_output" {
			t.Error("a hosted call was answered")
		}
	}

	// The continuation's outputs answer every pending call.
	pr, err := dialects[streaming.APIResponses].ParseRequest(out)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range pr.ToolResults {
		ids = append(ids, r.ID)
	}
	if want := []string{"call_ls1", "call_sh1", "call_ap1", "call_cu1", "call_foo1"}; !slices.Equal(ids, want) {
		t.Errorf("results %v, want %v", ids, want)
	}
}

// TestCallItemsRequestResults reads the output items of each call type as
// the results a request carries.
func TestCallItemsRequestResults(t *testing.T) {
	body := `{"model":"m","input":[` +
		`{"type":"local_shell_call","id":"lsh_1","call_id":"c1","status":"completed","action":{"type":"exec","command":["ls"],"env":{}}},` +
		`{"type":"shell_call","id":"sh_1","call_id":"c2","action":{"commands":["ls"]}},` +
		`{"type":"local_shell_call_output","id":"c1","output":"a\nb"},` +
		`{"type":"shell_call_output","call_id":"c2","output":[{"stdout":"x","stderr":"","outcome":{"type":"exit","exit_code":0}}]},` +
		`{"type":"apply_patch_call_output","call_id":"c3","status":"completed"},` +
		`{"type":"computer_call_output","call_id":"c4","output":{"type":"computer_screenshot","image_url":"data:,"}},` +
		`{"type":"foo_call_output","call_id":"c5","output":"done"},` +
		`{"type":"web_search_call_output","call_id":"c6"},` +
		`{"type":"mcp_approval_response","approval_request_id":"c7","approve":true}]}`
	pr, err := dialects[streaming.APIResponses].ParseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := []streaming.ToolResult{
		{ID: "c1", Type: "local_shell_call_output"}, {ID: "c2", Type: "shell_call_output"},
		{ID: "c3", Type: "apply_patch_call_output"}, {ID: "c4", Type: "computer_call_output"},
		{ID: "c5", Type: "foo_call_output"}, {ID: "c6", Type: "web_search_call_output"},
	}
	// Each result with an output digests it; c3 and c6 have none.
	for i := range pr.ToolResults {
		r := &pr.ToolResults[i]
		if hasOutput := r.ID != "c3" && r.ID != "c6"; (r.Digest != 0) != hasOutput {
			t.Errorf("%s: digest %d, has output %v", r.ID, r.Digest, hasOutput)
		}
		r.Digest = 0
	}
	if !slices.Equal(pr.ToolResults, want) {
		t.Errorf("results %+v, want %+v", pr.ToolResults, want)
	}
}
