package streaming_test

import (
	"os"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// A Responses stream whose output_item.done (or final output) carries
// another call than the one its output_item.added announced at the same
// output index. An agent that runs the items it is given done (Codex) or
// the final response's output runs that item; gatekeeper must never
// deliver a call it did not read, whatever the item swaps: its tool, its
// call_id, its id or its type.
func TestReplacedItemNeverDelivered(t *testing.T) {
	raw, err := os.ReadFile("testdata/filter/responses-hold-text-call.sse")
	if err != nil {
		t.Fatal(err)
	}
	swaps := map[string][2]string{
		"name":    {`"name":"Read"}`, `"name":"Bash"}`},
		"call_id": {`"call_id":"call_HeldRead01"`, `"call_id":"call_Swapped01"`},
		"id":      {`"id":"fc_HeldRead"`, `"id":"fc_Swapped"`},
		"type":    {`{"id":"fc_HeldRead","type":"function_call","status":"completed","arguments":"{\"file_path\": \"/srv/held-notes.txt\"}"`, `{"id":"fc_HeldRead","type":"custom_tool_call","status":"completed","input":"rm -rf /"`},
	}
	for _, where := range []string{"response.output_item.done", "response.completed", "both"} {
		for what, swap := range swaps {
			stream := swapIn(t, raw, where, swap[0], swap[1])
			t.Run(where+"/"+what, func(t *testing.T) {
				checkOneReading(t, streaming.APIResponses, stream)
				checkAgentReading(t, stream)
			})
		}
	}
}

// swapIn replaces old by new in the events named where ("both": the done
// item and the final response), and fails when nothing was replaced.
func swapIn(t *testing.T, stream []byte, where, old, new string) []byte {
	t.Helper()
	var out []byte
	n := 0
	_ = sse.Each(stream, func(ev *sse.Event) error {
		name := string(ev.Name)
		if name == where || where == "both" && (name == "response.output_item.done" || name == "response.completed") {
			if d := string(ev.Data); strings.Contains(d, old) && strings.Contains(d, `fc_HeldRead`) {
				out = sse.AppendFrame(out, name, []byte(strings.ReplaceAll(d, old, new)))
				n++
				return nil
			}
		}
		out = append(out, ev.Raw...)
		return nil
	})
	if n == 0 {
		t.Fatalf("%q not found in %s", old, where)
	}
	return out
}

// checkAgentReading reads what goes out as an agent that runs finished
// items does: every call item of an output_item.done, and of the final
// response's output, must be a call gatekeeper read in what came.
func checkAgentReading(t *testing.T, stream []byte) {
	t.Helper()
	res, err := streamtest.Decode(dialects[streaming.APIResponses], 0, [][]byte{stream})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, tc := range res.ClientToolCalls() {
		seen[tc.ID+"\x00"+tc.Name+"\x00"+tc.Type] = true
	}
	f := newTestFilter(t, streaming.APIResponses, allowAll)
	f.Hold()
	out := holdChunks(t, f, -1, stream)
	check := func(item gjson.Result) {
		typ := item.Get("type").Str
		if typ != "function_call" && typ != "custom_tool_call" {
			return
		}
		key := item.Get("call_id").Str + "\x00" + item.Get("name").Str + "\x00" + typ
		if !seen[key] {
			t.Errorf("the agent is given a call gatekeeper did not read: %s\nread: %v\nout:\n%s", item.Raw, seen, out)
		}
	}
	_ = sse.Each(out, func(ev *sse.Event) error {
		js := gjson.ParseBytes(ev.Data)
		switch js.Get("type").Str {
		case "response.output_item.done":
			check(js.Get("item"))
		case "response.completed":
			js.Get("response.output").ForEach(func(_, item gjson.Result) bool { check(item); return true })
		}
		return nil
	})
}
