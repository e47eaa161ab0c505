package streaming_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// spliceCase is a reply and its continuation, both in the package's
// testdata.
type spliceCase struct {
	name        string
	first, cont []string // path elements
}

var spliceCases = map[streaming.API][]spliceCase{
	streaming.APIAnthropic: {
		{"text then call, text", []string{filterTestdata, "anthropic-hold-text-call.sse"}, []string{anthropicTestdata, "text.sse"}},
		{"thinking, text, two calls; cont with its own call", []string{filterTestdata, "anthropic-text-refused-allowed.sse"}, []string{anthropicTestdata, "tool_use_fragmented.sse"}},
		{"call then text, thinking", []string{filterTestdata, "anthropic-hold-call-then-text.sse"}, []string{anthropicTestdata, "thinking_signature.sse"}},
		{"server tool then call, text", []string{anthropicTestdata, "server_tool_then_tool_use.sse"}, []string{anthropicTestdata, "text.sse"}},
	},
	streaming.APIChat: {
		{"text then call, text", []string{filterTestdata, "chat-hold-text-call.sse"}, []string{"chat/testdata", "azure-empty-first-chunk.sse"}},
		{"text, two calls; cont with its own call", []string{filterTestdata, "chat-text-refused-allowed.sse"}, []string{filterTestdata, "chat-hold-text-call.sse"}},
		{"parallel calls, usage on finish", []string{"chat/testdata", "parallel-tool-calls.sse"}, []string{"chat/testdata", "deepseek-usage-on-finish.sse"}},
		{"whole call, refusal", []string{"chat/testdata", "groq-whole-call-usage-on-finish.sse"}, []string{"chat/testdata", "refusal.sse"}},
	},
	streaming.APIResponses: {
		{"text then call, text", []string{filterTestdata, "responses-hold-text-call.sse"}, []string{"responses/testdata", "cached-tokens.sse"}},
		{"text, two calls; cont with its own call", []string{filterTestdata, "responses-text-refused-allowed.sse"}, []string{filterTestdata, "responses-hold-text-call.sse"}},
		{"call then text, reasoning and call", []string{filterTestdata, "responses-hold-call-then-text.sse"}, []string{"responses/testdata", "reasoning-then-function-call.sse"}},
		{"reasoning then call, no sequence numbers", []string{"responses/testdata", "reasoning-then-function-call.sse"}, []string{"responses/testdata", "function-call-no-sequence-done-without-name.sse"}},
	},
}

// heldFilterOut is what a Hold filter refusing nothing gives for the
// first n events of evs (all when n < 0).
func heldFilterOut(t *testing.T, api streaming.API, evs []sse.Event, n int) []byte {
	t.Helper()
	f := newHoldFilter(t, api, allowAll)
	var out []byte
	for i, ev := range evs {
		if n >= 0 && i >= n {
			break
		}
		out = f.AppendEvent(out, ev)
	}
	return out
}

func sumUsages(a, b streaming.Usage) streaming.Usage {
	return streaming.Usage{
		InputTokens: a.InputTokens + b.InputTokens, CachedInputTokens: a.CachedInputTokens + b.CachedInputTokens,
		CacheWriteTokens: a.CacheWriteTokens + b.CacheWriteTokens, OutputTokens: a.OutputTokens + b.OutputTokens,
		ReasoningTokens: a.ReasoningTokens + b.ReasoningTokens,
	}
}

// TestSpliceStream joins replies and continuations of several shapes and
// checks what the proxy relies on: a Hold filter over the spliced stream
// starts with exactly what it gave the client for the first reply before
// its stop; the spliced stream decodes as one whole reply with the first's
// id, the continuation's stop and calls, the text of both and the usage of
// both; and it assembles into the body SpliceJSON gives for the bodies.
func TestSpliceStream(t *testing.T) {
	for _, api := range escrowAPIs {
		for _, tc := range spliceCases[api] {
			t.Run(string(api)+"/"+tc.name, func(t *testing.T) {
				first, cont := fixturetest.ReadFile(t, tc.first...), fixturetest.ReadFile(t, tc.cont...)
				spliced, err := dialects[api].SpliceStream(first, cont)
				if err != nil {
					t.Fatal(err)
				}
				fevs := sseEvents(t, first)
				_, stop := callEvents(t, api, fevs)
				sent := heldFilterOut(t, api, fevs, stop)
				if got := heldFilterOut(t, api, sseEvents(t, spliced), -1); !bytes.HasPrefix(got, sent) {
					t.Fatalf("the filtered splice does not start with what the client has:\n%s\nwant prefix:\n%s", got, sent)
				}

				fres, _ := mustDecode(t, api, first)
				cres, _ := mustDecode(t, api, cont)
				sres, _ := mustDecode(t, api, spliced)
				if !sres.Done || sres.Truncated || sres.Unparsed != 0 || len(sres.Errors) != 0 {
					t.Fatalf("the splice is not one whole reply: %+v\n%s", sres, spliced)
				}
				if sres.MessageID != fres.MessageID || sres.Model != fres.Model {
					t.Errorf("id %q model %q, want the first's %q %q", sres.MessageID, sres.Model, fres.MessageID, fres.Model)
				}
				if got, want := sres.Usage, sumUsages(fres.Usage, cres.Usage); got != want {
					t.Errorf("usage %+v, want %+v", got, want)
				}
				if !slices.Equal(sres.Stops, cres.Stops) {
					t.Errorf("stops %+v, want the continuation's %+v", sres.Stops, cres.Stops)
				}
				sc, cc := sres.ClientToolCalls(), cres.ClientToolCalls()
				if len(sc) != len(cc) {
					t.Fatalf("calls %+v, want the continuation's %+v", sc, cc)
				}
				for i := range sc {
					if sc[i].ID != cc[i].ID || sc[i].Name != cc[i].Name || !sameArgs(sc[i].Arguments, cc[i].Arguments) {
						t.Errorf("call %d: %+v, want %+v", i, sc[i], cc[i])
					}
				}
				ft, ct, st := replyText(t, api, first), replyText(t, api, cont), replyText(t, api, spliced)
				for _, m := range []map[string]string{ft, ct, st} {
					for k := range m {
						if st[k] != ft[k]+ct[k] {
							t.Errorf("%s: %q, want %q", k, st[k], ft[k]+ct[k])
						}
					}
				}

				fb, err := dialects[api].AssembleJSON(first)
				if err != nil {
					t.Fatal(err)
				}
				cb, err := dialects[api].AssembleJSON(cont)
				if err != nil {
					t.Fatal(err)
				}
				want, err := dialects[api].SpliceJSON(fb, cb)
				if err != nil {
					t.Fatal(err)
				}
				got, err := dialects[api].AssembleJSON(spliced)
				if err != nil {
					t.Fatal(err)
				}
				if !jsonEqual(t, got, want) {
					t.Errorf("assembled splice:\n%s\nspliced bodies:\n%s", got, want)
				}
			})
		}
	}
}

// TestSpliceJSON joins bodies and decodes the result.
func TestSpliceJSON(t *testing.T) {
	for _, api := range escrowAPIs {
		for _, tc := range spliceCases[api] {
			t.Run(string(api)+"/"+tc.name, func(t *testing.T) {
				fb, err := dialects[api].AssembleJSON(fixturetest.ReadFile(t, tc.first...))
				if err != nil {
					t.Fatal(err)
				}
				cb, err := dialects[api].AssembleJSON(fixturetest.ReadFile(t, tc.cont...))
				if err != nil {
					t.Fatal(err)
				}
				out, err := dialects[api].SpliceJSON(fb, cb)
				if err != nil {
					t.Fatal(err)
				}
				fres, _ := dialects[api].DecodeJSON(fb)
				cres, _ := dialects[api].DecodeJSON(cb)
				sres, err := dialects[api].DecodeJSON(out)
				if err != nil {
					t.Fatal(err)
				}
				if sres.MessageID != fres.MessageID || sres.Usage != sumUsages(fres.Usage, cres.Usage) || !slices.Equal(sres.Stops, cres.Stops) {
					t.Errorf("spliced %+v\nfirst %+v\ncont %+v", sres, fres, cres)
				}
				if len(sres.ClientToolCalls()) != len(cres.ClientToolCalls()) {
					t.Errorf("calls %+v, want %+v", sres.ClientToolCalls(), cres.ClientToolCalls())
				}
			})
		}
	}
}

func TestSpliceErrors(t *testing.T) {
	whole := fixturetest.ReadFile(t, anthropicTestdata, "text.sse")
	cut := fixturetest.ReadFile(t, anthropicTestdata, "truncated_mid_tool.sse")
	tests := []struct {
		name        string
		api         streaming.API
		first, cont []byte
		want        error
	}{
		{"first cut", streaming.APIAnthropic, cut, whole, streaming.ErrIncompleteStream},
		{"cont cut", streaming.APIAnthropic, whole, cut, streaming.ErrIncompleteStream},
		{"chat cont error", streaming.APIChat, fixturetest.ReadFile(t, "chat/testdata", "refusal.sse"), fixturetest.ReadFile(t, "chat/testdata", "groq-error-event.sse"), streaming.ErrIncompleteStream},
		{"responses cont failed", streaming.APIResponses, fixturetest.ReadFile(t, "responses/testdata", "cached-tokens.sse"), fixturetest.ReadFile(t, "responses/testdata", "truncated-no-terminal.sse"), streaming.ErrIncompleteStream},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if out, err := dialects[tt.api].SpliceStream(tt.first, tt.cont); !errors.Is(err, tt.want) {
				t.Fatalf("got %s, %v; want %v", out, err, tt.want)
			}
		})
	}
	if _, err := dialects[streaming.APIChat].SpliceJSON([]byte(`{"choices":[`), []byte(`{}`)); !errors.Is(err, streaming.ErrInvalidJSON) {
		t.Errorf("SpliceJSON of a broken body: %v", err)
	}
}
