package trajectory

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestEventAppendJSON: an event's own encoder writes what encoding/json
// writes, for every field set or left out.
func TestEventAppendJSON(t *testing.T) {
	at := time.Date(2026, 12, 7, 14, 3, 4, 123456789, time.UTC)
	cases := []struct {
		name string
		ev   Event
	}{
		{"empty", Event{}},
		{"transition", Event{Seq: 3, At: at, Trajectory: "run-1/a", Type: EventTransition, From: Ready, To: CallingModel, Reason: "turn <1> & \"q\""}},
		{"turn data", Event{Seq: 1 << 40, At: at.In(time.FixedZone("x", -5*3600)), Trajectory: "r", Type: EventTurn,
			Data: json.RawMessage(`{"model":"claude-sonnet-4-5","usage":{"input_tokens":12},"dollars":0.000123,"note":"\u003cb\u003e"}`)}},
		{"unicode", Event{Trajectory: "r\u2028é\xff", Type: EventType("x")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, err := json.Marshal(c.ev)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.ev.AppendJSON([]byte("prefix"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[len("prefix"):], want) {
				t.Fatalf("AppendJSON = %s\nencoding/json = %s", got[len("prefix"):], want)
			}
		})
	}
	if _, err := (&Event{At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}).AppendJSON(nil); err == nil {
		t.Fatal("a year past 9999 encoded; encoding/json refuses it")
	}
}
