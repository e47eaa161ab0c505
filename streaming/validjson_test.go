package streaming_test

import (
	"testing"

	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// TestValidJSONOncePerEvent: the verdict on an event's data is taken once
// and kept in the event, for the decoder and the call filter to share, and
// every event the Reader hands out starts unchecked.
func TestValidJSONOncePerEvent(t *testing.T) {
	tests := []struct {
		name string
		data string
		want bool
	}{
		{"object", `{"a":1}`, true},
		{"spaces around", " {\"a\":1}\n", true},
		{"broken", `{"a":`, false},
		{"empty", ``, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := sse.Event{HasData: true, Data: []byte(tt.data)}
			if got := streaming.ValidJSON(&ev); got != tt.want {
				t.Fatalf("ValidJSON = %v, want %v", got, tt.want)
			}
			// A copy carries the verdict; the data is not read again.
			cp := ev
			cp.Data = []byte("not what was checked")
			if got := streaming.ValidJSON(&cp); got != tt.want {
				t.Errorf("the copy's verdict = %v, want the kept %v", got, tt.want)
			}
		})
	}

	r := sse.NewReader(0)
	var seen []sse.JSONCheck
	err := r.Feed([]byte("data: {}\n\ndata: {}\n\n"), func(ev *sse.Event) error {
		seen = append(seen, ev.JSON)
		streaming.ValidJSON(ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0] != sse.JSONUnchecked || seen[1] != sse.JSONUnchecked {
		t.Errorf("the Reader handed out %v, want two unchecked events", seen)
	}
}
