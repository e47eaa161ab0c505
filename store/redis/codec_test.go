package redis

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"gatekeeper/trajectory"
)

// sameEventArgs fails t unless eventArgs writes each event as json.Marshal
// of its eventJSON does, or refuses what it refuses.
func sameEventArgs(t *testing.T, evs []trajectory.Event) {
	t.Helper()
	args, err := eventArgs([]any{"first"}, evs)
	var wantErr error
	want := []any{"first"}
	for _, e := range evs {
		b, err := json.Marshal(eventJSON{At: e.At, Type: e.Type, From: e.From, To: e.To, Reason: e.Reason})
		if err != nil {
			wantErr = err
			break
		}
		want = append(want, string(b), string(e.Data))
	}
	if wantErr != nil {
		if err == nil {
			t.Fatalf("eventArgs = %q, want an error like %v", args, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatalf("eventArgs: %v", err)
	}
	if len(args) != len(want) {
		t.Fatalf("eventArgs = %q, want %q", args, want)
	}
	for i := range want {
		if args[i] != want[i] {
			t.Fatalf("eventArgs[%d] = %q, want %q", i, args[i], want[i])
		}
	}
}

var oddEventStrings = []string{
	"", "turn", "READY", "tool_use", "budget exceeded: 100%", "a\x7fb", "~`!@#$%^*()_+-=[]{}|;:',./?",
	"<b>", "fish & chips", `"quoted"`, `back\slash`, "tab\there", "nul\x00", "é", "line\u2028sep", "\xff", "日本",
}

var eventZones = []*time.Location{
	time.UTC, time.FixedZone("", 5*3600+1800), time.FixedZone("", -8*3600), time.FixedZone("", 59),
	time.FixedZone("", 23*3600+59*60), time.FixedZone("", 24*3600), time.FixedZone("", -30*3600),
}

func TestEventArgsAsMarshal(t *testing.T) {
	cases := []struct {
		name string
		ev   trajectory.Event
	}{
		{"transition", trajectory.Event{At: t0, Type: trajectory.EventTransition, From: trajectory.Ready, To: trajectory.CallingModel, Reason: "turn"}},
		{"turn with data", trajectory.Event{At: t0.Add(1234567 * time.Nanosecond), Type: trajectory.EventTurn, Reason: "tool_use", Data: json.RawMessage(`{"input_tokens":1}`)}},
		{"zero event", trajectory.Event{}},
		{"only a reason", trajectory.Event{At: t0, Reason: "x"}},
		{"html in reason", trajectory.Event{At: t0, Type: trajectory.EventControl, Reason: "<kill> & \"go\""}},
		{"one < in reason", trajectory.Event{At: t0, Type: trajectory.EventControl, Reason: "a<b"}},
		{"one > in type", trajectory.Event{At: t0, Type: "a>b"}},
		{"one & in to", trajectory.Event{At: t0, To: "a&b"}},
		{"DEL in from", trajectory.Event{At: t0, From: "a\x7fb"}},
		{"non-ASCII reason", trajectory.Event{At: t0, Type: trajectory.EventControl, Reason: "arrêt\u2029\xfe"}},
		{"odd type", trajectory.Event{At: t0, Type: "a<b", From: "é", To: "\n"}},
		{"zone", trajectory.Event{At: t0.In(time.FixedZone("IST", 5*3600+1800)), Type: trajectory.EventCreated}},
		{"local zone", trajectory.Event{At: t0.Local(), Type: trajectory.EventCreated}},
		{"monotonic clock reading", trajectory.Event{At: time.Now(), Type: trajectory.EventCreated}},
		{"year 10000", trajectory.Event{At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), Type: trajectory.EventCreated}},
		{"year -1", trajectory.Event{At: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), Type: trajectory.EventCreated}},
		{"zone 24 hours away", trajectory.Event{At: t0.In(time.FixedZone("", 24*3600)), Type: trajectory.EventCreated}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { sameEventArgs(t, []trajectory.Event{c.ev}) })
	}
	t.Run("several", func(t *testing.T) {
		var evs []trajectory.Event
		for _, c := range cases[:9] {
			evs = append(evs, c.ev)
		}
		sameEventArgs(t, evs)
	})
	t.Run("long", func(t *testing.T) {
		long := string(make([]byte, 1000))
		sameEventArgs(t, []trajectory.Event{{At: t0, Reason: "a" + long}, {At: t0, Reason: "short"}, {At: t0, Reason: long + "é"}})
	})
}

func TestEventArgsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	str := func() string {
		if rng.IntN(2) == 0 {
			return oddEventStrings[rng.IntN(len(oddEventStrings))]
		}
		b := make([]byte, rng.IntN(8))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return string(b)
	}
	for range 5000 {
		evs := make([]trajectory.Event, 1+rng.IntN(3))
		for i := range evs {
			evs[i] = trajectory.Event{
				At:   time.Unix(rng.Int64N(253402300799), rng.Int64N(1e9)).In(eventZones[rng.IntN(len(eventZones))]),
				Type: trajectory.EventType(str()), From: trajectory.State(str()), To: trajectory.State(str()), Reason: str(),
			}
			if rng.IntN(2) == 0 {
				evs[i].Data = json.RawMessage(str())
			}
		}
		sameEventArgs(t, evs)
	}
}

func BenchmarkEventArgs(b *testing.B) {
	evs := []trajectory.Event{{
		At: time.Date(2026, 12, 4, 14, 58, 56, 851073524, time.UTC), Type: trajectory.EventTransition,
		From: trajectory.Ready, To: trajectory.CallingModel, Reason: "turn",
	}}
	args := make([]any, 0, 8)
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := eventArgs(args[:0], evs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e := evs[0]
			js, err := json.Marshal(eventJSON{At: e.At, Type: e.Type, From: e.From, To: e.To, Reason: e.Reason})
			if err != nil {
				b.Fatal(err)
			}
			_ = append(args[:0], string(js), string(e.Data))
		}
	})
}

func BenchmarkEncodeRecord(b *testing.B) {
	r := trajectory.New("bench-0", "bench", t0)
	r.State = trajectory.CallingModel
	r.Thread, r.Provider, r.Model = "fp:15d16011990cf6f8c079a261f9af66eb", "anthropic", "claude-sonnet-4-5"
	r.Reserved = trajectory.Reservation{Calls: 1, Tokens: 287, Micros: 4026}
	r.CallReserved = r.Reserved
	r.Call, r.CallOwner, r.CallBeat, r.CallInput = "ac6cb043c625a2f0", "replica-d766f866327b2d69#f487f655a640c84b", t0, 31
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeRecord(r); err != nil {
			b.Fatal(err)
		}
	}
}
