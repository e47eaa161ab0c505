package responses

import (
	"bytes"
	"encoding/json"
	"testing"

	"gatekeeper/streaming/sse"
)

// sseEvents parses b as an SSE stream and returns its events.
func sseEvents(t testing.TB, b []byte) []sse.Event {
	t.Helper()
	var evs []sse.Event
	rd := sse.NewReader(0)
	err := rd.Feed(b, func(ev *sse.Event) error {
		c := *ev
		c.Name, c.Data = bytes.Clone(ev.Name), bytes.Clone(ev.Data)
		evs = append(evs, c)
		return nil
	})
	if err != nil {
		t.Fatalf("keepalive %q is not SSE: %v", b, err)
	}
	return evs
}

// checkInProgress: the keepalive built from a response.created event's
// data is one response.in_progress event whose data keeps every field of
// the original but the type; data without a response object gives none.
func checkInProgress(t testing.TB, data []byte) {
	out := inProgressEvent(data)
	var in map[string]json.RawMessage
	okIn := json.Unmarshal(data, &in) == nil
	if okIn {
		resp := bytes.TrimSpace(in["response"])
		okIn = len(resp) > 0 && resp[0] == '{'
	}
	if out == nil {
		if okIn {
			t.Fatalf("no keepalive from a created event with a response object: %q", data)
		}
		return
	}
	if !okIn {
		t.Fatalf("a keepalive %q from data without a response object: %q", out, data)
	}
	evs := sseEvents(t, out)
	if len(evs) != 1 || string(evs[0].Name) != "response.in_progress" || evs[0].Unterminated {
		t.Fatalf("keepalive %q: want one response.in_progress event", out)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(evs[0].Data, &got); err != nil {
		t.Fatalf("keepalive data %q: %v", evs[0].Data, err)
	}
	if string(got["type"]) != `"response.in_progress"` || len(got) != len(in)+boolInt(in["type"] == nil) {
		t.Fatalf("keepalive data %q from %q", evs[0].Data, data)
	}
	for k, v := range in {
		if k == "type" {
			continue
		}
		var a, b any
		if json.Unmarshal(v, &a) != nil || json.Unmarshal(got[k], &b) != nil || !jsonSame(a, b) {
			t.Fatalf("field %s changed: %s -> %s", k, v, got[k])
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func jsonSame(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

var inProgressSeeds = []string{
	`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"model":"gpt-4.1"}}`,
	`{"type":"response.created","response":{"id":"resp_<&>","instructions":"a\nb \u2028"}}`,
	`{"response":{}}`,
	`{"type":"response.created","response":null}`,
	`{"type":"response.created","response":"x"}`,
	`{"type":"response.created"}`,
	`[1,2]`,
	`not json`,
	``,
}

func TestInProgressEvent(t *testing.T) {
	for _, s := range inProgressSeeds {
		checkInProgress(t, []byte(s))
	}
	if inProgressEvent([]byte(inProgressSeeds[0])) == nil || inProgressEvent([]byte(`{"type":"response.created"}`)) != nil {
		t.Fatal("keepalive built from the wrong events")
	}
}

func FuzzInProgressEvent(f *testing.F) {
	for _, s := range inProgressSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkInProgress(t, data) })
}
