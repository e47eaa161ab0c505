package streaming_test

import (
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
)

// TestHoldStreams runs every stream through Hold with every call
// allowed: no part of a call goes out unfinished, every call of the reply
// is delivered whole or listed by Withheld, and the rest decodes alike.
func TestHoldStreams(t *testing.T) {
	for _, api := range filterAPIs {
		streams := filterStreams(t, api)
		for _, name := range slices.Sorted(maps.Keys(streams)) {
			t.Run(string(api)+"/"+name, func(t *testing.T) {
				in := streams[name]
				inRes, inSaid := mustDecode(t, api, in)
				f := newHoldFilter(t, api, allowAll)
				out := filterChunks(t, f, in)
				res, said := mustDecode(t, api, out)
				delivered := res.ClientToolCalls()
				for _, tc := range delivered {
					if !tc.Complete {
						t.Errorf("half a call went out: %+v", tc)
					}
				}
				if n, w := len(inRes.ClientToolCalls()), len(delivered)+len(f.Withheld()); n != w && !f.Holding() {
					t.Errorf("%d calls in, %d delivered and %d withheld", n, len(delivered), len(f.Withheld()))
				}
				for _, tc := range f.Withheld() {
					if _, ok := callByID(delivered, tc.ID); ok && tc.ID != "" {
						t.Errorf("withheld call %s delivered", tc.ID)
					}
				}
				for _, tc := range delivered {
					if !slices.ContainsFunc(inRes.ClientToolCalls(), func(in streaming.ToolCall) bool { return sameCall(tc, in) }) {
						t.Errorf("delivered %+v, which the reply does not have", tc)
					}
				}
				if !sameStops(res.Stops, inRes.Stops) || res.Truncated != inRes.Truncated || res.Done != inRes.Done ||
					len(res.Errors) != len(inRes.Errors) || res.Usage != inRes.Usage {
					t.Errorf("stops %+v truncated %v done %v errors %d usage %+v, input %+v %v %v %d %+v",
						res.Stops, res.Truncated, res.Done, len(res.Errors), res.Usage,
						inRes.Stops, inRes.Truncated, inRes.Done, len(inRes.Errors), inRes.Usage)
				}
				if said.Text != inSaid.Text {
					t.Error("text differs")
				}
				if apis[api].numbered && res.Unparsed == 0 {
					checkSequenceNumbers(t, in, out)
				}
			})
		}
	}
}

func callByID(calls []streaming.ToolCall, id string) (streaming.ToolCall, bool) {
	for _, tc := range calls {
		if tc.ID == id {
			return tc, true
		}
	}
	return streaming.ToolCall{}, false
}

// TestHoldFixtures: every recorded reply with a client call decodes after
// Hold to the same calls and stop, unless the provider cut it at its
// output limit.
func TestHoldFixtures(t *testing.T) {
	if !fixturetest.Present() {
		t.Skip("no recorded fixtures")
	}
	seen := 0
	for name, exp := range loadExpected(t) {
		api, ok := exp.decoderAPI()
		if !ok {
			continue
		}
		in := fixturetest.Read(t, name)
		inRes, _ := mustDecode(t, api, in)
		if len(inRes.ClientToolCalls()) == 0 {
			continue
		}
		seen++
		t.Run(name, func(t *testing.T) {
			f := newHoldFilter(t, api, allowAll)
			out := filterChunks(t, f, in)
			res, _ := mustDecode(t, api, out)
			if !sameStops(res.Stops, inRes.Stops) || res.Unparsed != inRes.Unparsed {
				t.Errorf("stops %+v unparsed %d, want %+v %d", res.Stops, res.Unparsed, inRes.Stops, inRes.Unparsed)
			}
			if inRes.StopReason() == streaming.StopMaxTokens {
				return
			}
			want, got := inRes.ClientToolCalls(), res.ClientToolCalls()
			if len(got) != len(want) {
				t.Fatalf("delivered %d calls, want %d", len(got), len(want))
			}
			for i := range want {
				if !sameCall(got[i], want[i]) || got[i].Index != want[i].Index {
					t.Errorf("call %d: %+v, want %+v", i, got[i], want[i])
				}
			}
			if f.Holding() || len(f.Withheld()) != 0 {
				t.Errorf("holding %v, withheld %+v", f.Holding(), f.Withheld())
			}
		})
	}
	if seen == 0 {
		t.Fatal("no fixture has a client call")
	}
}

// TestHoldFastPath: with Hold and every call allowed, an event that is
// neither a call's nor the stop that delivers the calls, and comes while
// no call is held, costs no allocation. One that comes while a call is
// held is kept behind it, as the call's own events are.
func TestHoldFastPath(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	streams := map[string]struct {
		api  streaming.API
		data []byte
	}{
		"anthropic tool call": {streaming.APIAnthropic, benchToolStream()},
		"anthropic text": {streaming.APIAnthropic, benchAnthropicStream(`{"type":"text","text":""}`, 600, func(i int) string {
			return `{"type":"text_delta","text":"word ` + strconv.Itoa(i) + ` "}`
		})},
		"chat tool calls":     {streaming.APIChat, openAIBenchChatStream(3, 400)},
		"responses tool call": {streaming.APIResponses, benchResponsesToolStream(400)},
	}
	for _, api := range filterAPIs {
		for _, path := range fixturetest.Glob(t, filepath.Join(filterTestdata, apis[api].holdPrefix+"*.sse")) {
			streams[filepath.Base(path)] = struct {
				api  streaming.API
				data []byte
			}{api, fixturetest.ReadFile(t, path)}
		}
	}
	for name, s := range streams {
		t.Run(name, func(t *testing.T) {
			evs := sseEvents(t, s.data)
			call, stop := callEvents(t, s.api, evs)
			f := newHoldFilter(t, s.api, allowAll)
			dst := make([]byte, 0, 2*len(s.data))
			// As testing.AllocsPerRun does, on one P to keep the count to
			// this goroutine's.
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			var ms runtime.MemStats
			for i, ev := range evs {
				kept := f.Holding()
				runtime.ReadMemStats(&ms)
				before := ms.Mallocs
				dst = f.AppendEvent(dst, ev)
				runtime.ReadMemStats(&ms)
				if n := ms.Mallocs - before; n != 0 && !call[i] && i != stop && !kept {
					t.Errorf("event %d (%.60q) allocated %d times", i, ev.Raw, n)
				}
			}
		})
	}
}
