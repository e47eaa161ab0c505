package trajectory

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

var testLimits = WatchLimits{RepeatedCalls: 5, CallWindow: 8, RepeatedResults: 5, ErrorResults: 5, IdleTurns: 4, Last: LoopPause}

func TestWatchObserveReply(t *testing.T) {
	same := SeenCall{Name: "Bash", Digest: 0xa}
	tests := []struct {
		name  string
		turns [][]SeenCall
		text  []bool // per turn; missing: true
		want  string // the kind of the last turn's signal; "" for none
		count int64
		at    int // the turn (0-based) the first signal came on; -1 for none
	}{
		{name: "identical calls", turns: repeat([]SeenCall{same}, 6), want: SignalRepeatedCall, count: 6, at: 4},
		{name: "edit and test alternating stay under the threshold",
			turns: alternate(20, func(i int) []SeenCall {
				if i%2 == 0 {
					return []SeenCall{{Name: "Edit", Digest: Digest(100 + i)}}
				}
				return []SeenCall{same}
			}), at: -1},
		{name: "repeats spread wider than the window", turns: alternate(30, func(i int) []SeenCall {
			if i%3 == 0 {
				return []SeenCall{same}
			}
			return []SeenCall{{Name: "Read", Digest: Digest(100 + i)}}
		}), at: -1},
		{name: "parallel identical calls count each", turns: [][]SeenCall{{same, same, same}, {same, same}}, want: SignalRepeatedCall, count: 5, at: 1},
		{name: "replies without calls or text", turns: repeat([]SeenCall(nil), 4), text: []bool{false, false, false, false},
			want: SignalNoProgress, count: 4, at: 3},
		{name: "text is progress", turns: repeat([]SeenCall(nil), 8), at: -1},
		{name: "a repeated call without text is no progress", turns: [][]SeenCall{{same}, {same}, {same}, {same}},
			text: []bool{true, false, false, false}, at: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var w Watch
			var sig *LoopSignal
			first := -1
			for i, calls := range tc.turns {
				text := true
				if i < len(tc.text) {
					text = tc.text[i]
				}
				sig = w.ObserveReply(testLimits, calls, text)
				if sig != nil && first < 0 {
					first = i
				}
				if len(w.Calls) > int(testLimits.CallWindow) {
					t.Fatalf("turn %d: %d calls kept, window %d", i, len(w.Calls), testLimits.CallWindow)
				}
			}
			if first != tc.at {
				t.Errorf("first signal on turn %d, want %d", first, tc.at)
			}
			switch {
			case tc.want == "" && sig != nil:
				t.Errorf("signal %+v, want none", *sig)
			case tc.want != "" && (sig == nil || sig.Kind != tc.want || sig.Count != tc.count):
				t.Errorf("signal %+v, want %s with count %d", sig, tc.want, tc.count)
			}
		})
	}
}

func TestWatchObserveResults(t *testing.T) {
	r := func(d Digest, e bool) SeenResult { return SeenResult{Digest: d, Error: e} }
	tests := []struct {
		name    string
		results []SeenResult
		want    string
		count   int64
	}{
		{"identical results", []SeenResult{r(7, false), r(7, false), r(7, false), r(7, false), r(7, false)}, SignalRepeatedResult, 5},
		{"a different result breaks the row", []SeenResult{r(7, false), r(7, false), r(7, false), r(7, false), r(8, false), r(7, false)}, "", 0},
		{"empty results neither count nor break", []SeenResult{r(7, false), r(0, false), r(7, false), r(0, false), r(7, false), r(7, false), r(7, false)}, SignalRepeatedResult, 5},
		{"only empty results", []SeenResult{r(0, false), r(0, false), r(0, false), r(0, false), r(0, false), r(0, false)}, "", 0},
		{"errors in a row", []SeenResult{r(1, true), r(2, true), r(3, true), r(4, true), r(5, true)}, SignalErrorResults, 5},
		{"a success breaks the errors", []SeenResult{r(1, true), r(2, true), r(3, true), r(4, true), r(5, false), r(6, true)}, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var w Watch
			var sig *LoopSignal
			for _, res := range tc.results {
				// One result per request, as a sequential agent sends them.
				sig = w.ObserveResults(testLimits, []SeenResult{res})
			}
			switch {
			case tc.want == "" && sig != nil:
				t.Errorf("signal %+v, want none", *sig)
			case tc.want != "" && (sig == nil || sig.Kind != tc.want || sig.Count != tc.count):
				t.Errorf("signal %+v, want %s with count %d", sig, tc.want, tc.count)
			}
		})
	}
}

func TestWatchEscalate(t *testing.T) {
	sig := &LoopSignal{Kind: SignalRepeatedCall, Count: 5}
	for _, last := range []LoopStep{LoopPause, LoopFail} {
		t.Run(string(last), func(t *testing.T) {
			l := testLimits
			l.Last = last
			var w Watch
			steps := []LoopStep{
				w.Escalate(l, sig, 5),
				w.Escalate(l, sig, 5), // the same turn: no second step
				w.Escalate(l, nil, 6), // no signal: no step
				w.Escalate(l, sig, 6),
				w.Escalate(l, sig, 7),
				w.Escalate(l, sig, 8), // past the last step
			}
			want := []LoopStep{LoopSteer, "", "", LoopRestrict, last, ""}
			for i := range want {
				if steps[i] != want[i] {
					t.Errorf("escalation %d: %q, want %q", i, steps[i], want[i])
				}
			}
			if w.Step != last || w.Signal == nil || w.Signal.Count != 5 || w.Notice {
				t.Errorf("watch %+v after the last step", w)
			}
		})
	}
}

func TestWatchJSONAndResume(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	rec := New("run-1", "team-a", now)
	rec.Watch.ObserveReply(testLimits, []SeenCall{{Name: "Bash", Digest: 0xfedcba9876543210}}, false)
	rec.Watch.Escalate(testLimits, &LoopSignal{Kind: SignalRepeatedCall, Tool: "Bash", Digest: 0xfedcba9876543210, Count: 5, Threshold: 5}, 3)
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var back Record
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Watch.Calls) != 1 || back.Watch.Calls[0] != 0xfedcba9876543210 || back.Watch.Step != LoopSteer ||
		back.Watch.Signal == nil || back.Watch.Signal.Tool != "Bash" || !back.Watch.Notice {
		t.Errorf("read back %s as %+v", b, back.Watch)
	}
	c := rec.Clone()
	c.Watch.Calls[0] = 1
	c.Watch.Signal.Count = 9
	if rec.Watch.Calls[0] == 1 || rec.Watch.Signal.Count == 9 {
		t.Error("a clone shares its watch with the record")
	}
	if _, _, err := rec.RequestControl(Control{Kind: ControlResume}, now); err != nil {
		t.Fatal(err)
	}
	if !rec.Watch.IsZero() {
		t.Errorf("watch %+v after a resume, want cleared", rec.Watch)
	}
	if b, _ := json.Marshal(rec); strings.Contains(string(b), `"watch"`) {
		t.Errorf("an empty watch is written: %s", b)
	}
}

func repeat(calls []SeenCall, n int) [][]SeenCall {
	out := make([][]SeenCall, n)
	for i := range out {
		out[i] = calls
	}
	return out
}

func alternate(n int, f func(int) []SeenCall) [][]SeenCall {
	out := make([][]SeenCall, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}
