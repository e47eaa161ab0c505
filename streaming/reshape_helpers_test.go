package streaming_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"gatekeeper/streaming"
)

// escrowAPIs are the APIs every escrow function serves.
var escrowAPIs = []streaming.API{streaming.APIAnthropic, streaming.APIChat, streaming.APIResponses}

// filterPrefix is how the names of api's streams in the filter's testdata
// begin.
func filterPrefix(api streaming.API) string { return apis[api].prefix }

// wholeReply reports whether a decoded stream is a reply that stopped
// cleanly: the ones AssembleJSON must turn into a body.
func wholeReply(res *streaming.Result) bool {
	if !res.Done || res.Truncated || len(res.Errors) > 0 || len(res.Stops) == 0 || res.Unparsed > 0 {
		return false
	}
	for _, tc := range res.ClientToolCalls() {
		if apis[res.API].objectInput && !json.Valid(tc.Arguments) {
			return false // cut at the output limit: no Message holds that input
		}
	}
	return true
}

// completeCalls leaves out of res the calls whose end never came: a
// Responses reply's final output does not list them.
func completeCalls(res *streaming.Result) *streaming.Result {
	out := *res
	out.ToolCalls = slices.DeleteFunc(slices.Clone(res.ToolCalls), func(tc streaming.ToolCall) bool { return !tc.Complete })
	return &out
}

// sameArgs compares arguments as JSON when both are JSON, else as bytes.
func sameArgs(a, b []byte) bool {
	if json.Valid(a) && json.Valid(b) {
		var va, vb any
		_ = json.Unmarshal(a, &va)
		_ = json.Unmarshal(b, &vb)
		ja, _ := json.Marshal(va)
		jb, _ := json.Marshal(vb)
		return bytes.Equal(ja, jb)
	}
	return bytes.Equal(a, b)
}

// checkSameReply fails unless two results carry the same reply: stops,
// client calls (id, name, arguments), usage, id and model.
func checkSameReply(t *testing.T, got, want *streaming.Result) {
	t.Helper()
	if got.MessageID != want.MessageID || got.Model != want.Model {
		t.Errorf("id/model %q/%q, want %q/%q", got.MessageID, got.Model, want.MessageID, want.Model)
	}
	if !slices.Equal(got.Stops, want.Stops) {
		t.Errorf("stops %+v, want %+v", got.Stops, want.Stops)
	}
	if got.Usage != want.Usage || got.UsageSeen != want.UsageSeen {
		t.Errorf("usage %+v (seen %v), want %+v (seen %v)", got.Usage, got.UsageSeen, want.Usage, want.UsageSeen)
	}
	gc, wc := got.ClientToolCalls(), want.ClientToolCalls()
	if len(gc) != len(wc) {
		t.Fatalf("%d client calls, want %d: %+v", len(gc), len(wc), gc)
	}
	for i := range gc {
		if gc[i].ID != wc[i].ID || gc[i].Name != wc[i].Name || gc[i].Choice != wc[i].Choice || !sameArgs(gc[i].Arguments, wc[i].Arguments) {
			t.Errorf("call %d: %s %s %s, want %s %s %s", i, gc[i].ID, gc[i].Name, gc[i].Arguments, wc[i].ID, wc[i].Name, wc[i].Arguments)
		}
	}
}

// replyText is the text a stream says, by kind and choice.
func replyText(t *testing.T, api streaming.API, stream []byte) map[string]string {
	t.Helper()
	_, said := mustDecode(t, api, stream)
	return said.ByChoice
}

func sortedNames(m map[string][]byte) []string { return slices.Sorted(maps.Keys(m)) }
