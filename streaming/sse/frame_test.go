package sse

import (
	"errors"
	"testing"
)

// TestAppendFrame writes events and reads them back: what a Reader makes of
// a written frame is the name and data it was written with.
func TestAppendFrame(t *testing.T) {
	tests := []struct {
		name, event, data, want string
	}{
		{"named", "ping", `{"type":"ping"}`, "event: ping\ndata: {\"type\":\"ping\"}\n\n"},
		{"unnamed", "", `{"a":1}`, "data: {\"a\":1}\n\n"},
		{"data over lines", "delta", "a\nb", "event: delta\ndata: a\ndata: b\n\n"},
		{"empty data", "", "", "data: \n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AppendFrame([]byte("x"), tt.event, []byte(tt.data))
			if string(got) != "x"+tt.want {
				t.Fatalf("AppendFrame = %q, want %q", got, "x"+tt.want)
			}
			var n int
			err := Each(got[1:], func(ev *Event) error {
				n++
				if string(ev.Name) != tt.event || string(ev.Data) != tt.data || !ev.HasData {
					t.Errorf("read back name %q data %q, want %q %q", ev.Name, ev.Data, tt.event, tt.data)
				}
				return nil
			})
			if err != nil || n != 1 {
				t.Fatalf("read back %d events: %v", n, err)
			}
		})
	}
}

func TestFrameNameAndBOM(t *testing.T) {
	named, unnamed := &Event{Name: []byte("x"), Raw: []byte("\xEF\xBB\xBFevent: x\ndata: 1\n\n")}, &Event{Raw: []byte("data: 1\n\n")}
	if FrameName(named, "y") != "y" || FrameName(unnamed, "y") != "" {
		t.Errorf("FrameName: %q for a named event, %q for an unnamed one", FrameName(named, "y"), FrameName(unnamed, "y"))
	}
	if got := string(KeepBOM([]byte("a"), named)); got != "a\xEF\xBB\xBF" {
		t.Errorf("KeepBOM on the first event = %q", got)
	}
	if got := string(KeepBOM([]byte("a"), unnamed)); got != "a" {
		t.Errorf("KeepBOM without a BOM = %q", got)
	}
	if got := string(TrimBOM(named.Raw)); got != "event: x\ndata: 1\n\n" {
		t.Errorf("TrimBOM = %q", got)
	}
}

// TestEachStopsAtError: an error from fn ends the read and is returned.
func TestEachStopsAtError(t *testing.T) {
	stop := errors.New("stop")
	var n int
	err := Each([]byte("data: 1\n\ndata: 2\n\n"), func(*Event) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("Each returned %v after %d events, want stop after 1", err, n)
	}
}
