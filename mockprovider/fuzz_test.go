package mockprovider

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

var fuzzNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// checkRendered renders a plan as a stream and as a body and checks what
// any client relies on: one-line JSON data, event names equal to types,
// Responses sequence numbers in order.
func checkRendered(t *testing.T, p *plan, rnd *rand.Rand) {
	t.Helper()
	if p.fail == failHTTP {
		return
	}
	for i, ev := range renderStream(p, rnd, "req_1") {
		if bytes.ContainsAny(ev.data, "\r\n") {
			t.Fatalf("event %d data spans lines: %q", i, ev.data)
		}
		if string(ev.data) == "[DONE]" {
			continue
		}
		if !json.Valid(ev.data) {
			t.Fatalf("event %d data is not JSON: %s", i, ev.data)
		}
		typ := gjson.GetBytes(ev.data, "type").String()
		if p.api != APIChat && ev.name != typ {
			t.Fatalf("event %d named %q has type %q", i, ev.name, typ)
		}
		if p.api == APIResponses && gjson.GetBytes(ev.data, "sequence_number").Int() != int64(i) {
			t.Fatalf("event %d has sequence_number %s", i, gjson.GetBytes(ev.data, "sequence_number").Raw)
		}
	}
	if body := renderBody(p); !json.Valid(body) {
		t.Fatalf("body is not JSON: %s", body)
	}
}

var fuzzAPIs = []API{APIAnthropic, APIChat, APIResponses}

// FuzzTurn feeds arbitrary request bodies and X-Mock-Turn specs through
// request reading, planning and rendering.
func FuzzTurn(f *testing.F) {
	for _, tb := range turnBodies {
		f.Add(uint8(0), []byte(tb.body), `{"kind":"tool","tools":[{"name":"f","input":{"a":"x\"y\n\u00e9"}}]}`)
	}
	f.Add(uint8(1), []byte(`{"model":"m","messages":[{"role":"tool","content":[{"type":"text","text":"r"}]}],"stream":true}`), `{"kind":"disconnect","after_deltas":3}`)
	f.Add(uint8(2), []byte("{\"model\":\"m\",\"tools\":[\n{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"properties\":{\"e\":{\"enum\":[{\"a\":\n1}]}},\"required\":[\"e\"]}}],\"stream\":true}"), `{"kind":"max_tokens","cut_in_tool":true}`)
	f.Add(uint8(0), []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"é\u2028"}],"system":[{"text":"s","cache_control":{"type":"ephemeral"}}]}`), `{"kind":"max_tokens","text":"héllo wörld","deltas":50}`)
	f.Add(uint8(2), []byte(`{"model":"m","input":"x","stream":true}`), `{"kind":"error_midstream","thinking":"t","deltas":1}`)
	f.Add(uint8(1), []byte(`{"model":"m","messages":[]}`), `{"kind":"refusal","text":"\u0000\ud800"}`)
	f.Fuzz(func(t *testing.T, which uint8, body []byte, spec string) {
		if !gjson.ValidBytes(body) || len(body) > 1<<16 {
			return // the server answers 400 before planning
		}
		s, err := parseSpecJSON(spec)
		if err != nil {
			if !errors.Is(err, ErrInvalidScript) {
				t.Fatalf("spec error %v does not wrap ErrInvalidScript", err)
			}
			return
		}
		api := fuzzAPIs[int(which)%len(fuzzAPIs)]
		rnd := rand.New(rand.NewPCG(uint64(which), 7))
		req := parseTurnRequest(api, body)
		p := buildPlan(s, req, rnd, fuzzNow)
		checkRendered(t, p, rnd)
		if p.fail == failNone {
			if got := strings.Join(p.textDeltas, ""); got != p.text {
				t.Fatalf("text deltas %q join to %q", p.textDeltas, got)
			}
			for _, c := range p.calls {
				if got := strings.Join(c.frags, ""); got != c.args {
					t.Fatalf("fragments %q join to %q", c.frags, got)
				}
			}
		}
	})
}

// FuzzParseScript checks that any input either parses into a script whose
// every turn renders on every API, or fails with ErrInvalidScript.
func FuzzParseScript(f *testing.F) {
	if example, err := os.ReadFile("testdata/script.yaml"); err == nil {
		f.Add(example)
	}
	f.Add([]byte("turns:\n  a: {kind: tool, tools: [{name: f, input: {x: [1, {y: z}]}}]}\nrules:\n  - {when: {api: chat}, turn: a}\n"))
	f.Add([]byte("rules:\n  - when: {has_tool_results: false}\n    turn: {kind: disconnect, after_deltas: 1}\n"))
	f.Add([]byte("rules:\n  - when: {declares_tool: Bash, last_user_contains: tidy}\n    turn: {kind: tool, tools: [{name: Bash, input: {command: ls}}]}\n"))
	f.Add([]byte("turns:\n  a: {kind: tool, tools: [{name: f, input: {1: 2}}]}\n"))
	f.Add([]byte("turns: {a: {event_delay: 1ms, retry_after: 0s}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseScript(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidScript) {
				t.Fatalf("error %v does not wrap ErrInvalidScript", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("parsed script fails validation: %v", err)
		}
		specs := make([]TurnSpec, 0, len(s.Turns)+len(s.Rules))
		for _, spec := range s.Turns {
			specs = append(specs, spec)
		}
		for _, r := range s.Rules {
			if r.Turn.Spec != nil {
				specs = append(specs, *r.Turn.Spec)
			}
		}
		rnd := rand.New(rand.NewPCG(1, 2))
		for _, spec := range specs {
			for _, api := range fuzzAPIs {
				req := parseTurnRequest(api, []byte(turnBodies[api].body))
				checkRendered(t, buildPlan(spec, req, rnd, fuzzNow), rnd)
			}
		}
	})
}
