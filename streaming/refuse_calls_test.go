package streaming_test

import (
	"bytes"
	"slices"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
)

// TestRefuseCallsByID refuses the Bash call of each filter reply by its id
// with every name allowed, and expects exactly what refusing the name
// Bash gives: the same bytes, the same refused calls, with and without
// Hold, streamed and whole.
func TestRefuseCallsByID(t *testing.T) {
	streams := map[streaming.API]string{
		streaming.APIAnthropic: "anthropic-text-refused-allowed.sse",
		streaming.APIChat:      "chat-text-refused-allowed.sse",
		streaming.APIResponses: "responses-text-refused-allowed.sse",
	}
	bodies := map[streaming.API]string{
		streaming.APIAnthropic: "anthropic-body.json",
		streaming.APIChat:      "chat-body.json",
		streaming.APIResponses: "responses-body.json",
	}
	for _, api := range []streaming.API{streaming.APIAnthropic, streaming.APIChat, streaming.APIResponses} {
		stream := fixturetest.ReadFile(t, filterTestdata, streams[api])
		body := fixturetest.ReadFile(t, filterTestdata, bodies[api])
		t.Run(string(api), func(t *testing.T) {
			res, _ := mustDecode(t, api, stream)
			bash, ok := callByName(res.ToolCalls, "Bash")
			if !ok || bash.ID == "" {
				t.Fatalf("no Bash call with an id in %s", streams[api])
			}
			for _, hold := range []bool{false, true} {
				byName := newTestFilter(t, api, refuseNames("Bash"))
				byID := newTestFilter(t, api, allowAll)
				byID.RefuseCalls(bash.ID)
				if hold {
					byName.Hold()
					byID.Hold()
				}
				want := filterChunks(t, byName, stream)
				got := filterChunks(t, byID, stream)
				if !bytes.Equal(got, want) {
					t.Errorf("hold=%v: refused by id:\n%s\nrefused by name:\n%s", hold, got, want)
				}
				if !slices.EqualFunc(byID.Refused(), byName.Refused(), sameCall) || len(byID.Refused()) != 1 {
					t.Errorf("hold=%v: refused %+v, want %+v", hold, byID.Refused(), byName.Refused())
				}
				if bytes.Contains(got, []byte(withheldArgument)) {
					t.Errorf("hold=%v: the refused call's arguments reached the client", hold)
				}
			}

			bres, err := dialects[api].DecodeJSON(body)
			if err != nil {
				t.Fatal(err)
			}
			bbash, _ := callByName(bres.ToolCalls, "Bash")
			byName := newTestFilter(t, api, refuseNames("Bash"))
			byID := newTestFilter(t, api, allowAll)
			byID.RefuseCalls(bbash.ID)
			want, err := byName.Body(body)
			if err != nil {
				t.Fatal(err)
			}
			got, err := byID.Body(body)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) || len(byID.Refused()) != 1 {
				t.Errorf("body refused by id:\n%s\nby name:\n%s", got, want)
			}
		})
	}
}

// TestRefuseCallsOtherIDs leaves a reply alone when no call has a named id.
func TestRefuseCallsOtherIDs(t *testing.T) {
	for _, api := range []streaming.API{streaming.APIAnthropic, streaming.APIChat, streaming.APIResponses} {
		stream := fixturetest.ReadFile(t, filterTestdata, apis[api].holdPrefix+"text-call.sse")
		f := newTestFilter(t, api, allowAll)
		f.RefuseCalls("call_none", "", "toolu_none")
		if got := filterChunks(t, f, stream); !bytes.Equal(got, stream) || len(f.Refused()) != 0 {
			t.Errorf("%s: a reply without the ids changed:\n%s", api, got)
		}
	}
}
