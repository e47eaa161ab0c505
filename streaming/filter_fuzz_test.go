package streaming_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// fuzzAllow turns a byte into a policy: allow all, refuse all, or refuse
// the names whose hash has a bit set, the bit chosen by the byte.
func fuzzAllow(sel byte) func(string) bool {
	switch sel & 3 {
	case 0:
		return allowAll
	case 1:
		return refuseAll
	}
	bit := sel >> 2 & 31
	return func(name string) bool {
		h := fnv.New32a()
		h.Write([]byte(name))
		return h.Sum32()>>bit&1 == 0
	}
}

// A fuzz input runs through a filter with a policy (sel), with or without
// Hold, ended by End before event end (never when end is 0).
func FuzzCallFilter(f *testing.F) {
	i := 0
	for _, api := range filterAPIs {
		for _, dir := range []string{filterTestdata, decoderTestdata[api]} {
			prefix := ""
			if dir == filterTestdata {
				prefix = map[streaming.API]string{streaming.APIAnthropic: "anthropic-", streaming.APIChat: "chat-", streaming.APIResponses: "responses-"}[api]
			}
			for _, path := range fixturetest.Glob(f, filepath.Join(dir, prefix+"*.sse")) {
				data := fixturetest.ReadFile(f, path)
				f.Add(data, byte(i), false, uint16(0))
				f.Add(data, byte(i)|0x40, true, uint16(i%3*(1+i%17))) // held, with the cut notice
				i++
			}
		}
	}
	for i := range 8 {
		for _, gen := range []func(*filterGen) []byte{(*filterGen).anthropic, (*filterGen).chat, (*filterGen).responses} {
			f.Add(gen(&filterGen{rng: rand.New(rand.NewPCG(uint64(i), 11))}), byte(i), i%2 == 1, uint16(i%3*4))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, sel byte, hold bool, end uint16) {
		if len(data) > 1<<16 {
			return
		}
		for _, api := range filterAPIs {
			checkFilterFuzz(t, api, data, sel, hold, int(end)-1)
		}
	})
}

// checkFilterFuzz checks what must hold for any input and policy, held or
// not, ended early (before event end, when end >= 0) or not: the output is
// the same however the input is cut, allowing everything changes nothing
// (without Hold and End), the output parses, no call it delivers names a
// refused tool or carries the id of a withheld call, and every event the
// filter wrote is JSON. With Hold, no call goes out unfinished; with End,
// the reply ends with its error.
func checkFilterFuzz(t *testing.T, api streaming.API, data []byte, sel byte, hold bool, end int) {
	allow := fuzzAllow(sel)
	fail := func(format string, args ...any) {
		t.Helper()
		if len(data) < 4<<10 {
			t.Logf("input (policy %d, hold %v, end %d):\n%s", sel, hold, end, data)
		}
		t.Fatalf(format, args...)
	}
	in, err := streamtest.Decode(dialects[api], 0, fixturetest.Whole(data))
	if err != nil {
		return // the Reader refused the input
	}
	filter := func() *streaming.CallFilter {
		f := newTestFilter(t, api, allow)
		if hold {
			f.Hold()
			if sel&0x40 != 0 {
				f.NoticeCut(func(c streaming.ToolCall) string { return "cut: " + c.Name })
			}
		}
		return f
	}
	f := filter()
	out := holdChunks(t, f, end, data)
	rng := rand.New(rand.NewPCG(uint64(sel), uint64(len(data))))
	if cut := holdChunks(t, filter(), end, fixturetest.RandomSplit(data, rng)...); !bytes.Equal(cut, out) {
		fail("%s: output depends on the cuts", api)
	}
	if sel&3 == 0 && !hold && end < 0 && !bytes.Equal(out, unrepeatedStream(t, data)) {
		fail("%s: allow all changed the stream (but for events repeating a member)", api)
	}
	res, err := streamtest.Decode(dialects[api], 0, fixturetest.Whole(out))
	if err != nil {
		fail("%s: the output does not parse: %v", api, err)
	}
	inData := map[string]bool{}
	for _, ev := range sseEvents(t, data) {
		inData[string(ev.Data)] = true
	}
	for _, ev := range sseEvents(t, out) {
		d := bytes.TrimSpace(ev.Data)
		if ev.HasData && len(d) > 0 && d[0] == '{' && !gjson.ValidBytes(d) && !inData[string(ev.Data)] {
			fail("%s: the filter wrote an event that is not JSON: %q", api, ev.Raw)
		}
	}
	delivered := res.ClientToolCalls()
	for _, tc := range delivered {
		if tc.Name != "" && !allow(tc.Name) {
			fail("%s: delivered a call to refused tool %q: %+v", api, tc.Name, tc)
		}
	}
	// Where an event repeats a member, the decoder reads one and the filter
	// judges all (see below): the two may not agree on which call an
	// element belongs to.
	repeats := repeatsMembers(t, data)
	for _, tc := range delivered {
		if hold && !tc.Complete && !repeats {
			fail("%s: delivered half a call: %+v", api, tc)
		}
	}
	if end >= 0 {
		if len(res.Errors) == 0 || res.Errors[len(res.Errors)-1].Type != cancelType || f.Holding() {
			fail("%s: ended early, errors %+v, holding %v", api, res.Errors, f.Holding())
		}
	}
	// A held call dropped never goes out, unless the input gives its id to
	// another call too: to several items (Responses), or in several
	// fragments (elsewhere, where it is written once per call).
	inIDs := map[string]int{}
	for _, tc := range in.ClientToolCalls() {
		inIDs[tc.ID]++
	}
	shared := apis[api].sharedCallIDs
	if shared != nil {
		for id, items := range shared(t, data) {
			if len(items) > 1 {
				inIDs[id] += 2
			}
		}
	}
	for _, w := range f.Withheld()[len(f.Refused()):] {
		if w.ID == "" || inIDs[w.ID] != 1 || repeats ||
			shared == nil && bytes.Count(data, []byte(strconv.Quote(w.ID))) > 1 {
			continue
		}
		for _, tc := range delivered {
			if tc.ID == w.ID {
				fail("%s: delivered the id of dropped call %+v: %+v", api, w, tc)
			}
		}
	}
	// Where an event repeats a member, the decoder reads one and the filter
	// judges all: an id may then go out with an allowed call the decoder of
	// the input never saw. So may an id the model gave several calls, or
	// one the decoder reads as an allowed call's.
	// A policy that lets nameless calls through lets out a call before its
	// name comes; what went out stays out.
	if repeats || allow("") {
		return
	}
	ids := map[string]int{}
	for _, tc := range in.ClientToolCalls() {
		ids[tc.ID]++
		if allow(tc.Name) {
			ids[tc.ID]++
		}
	}
	if shared != nil {
		for id, items := range shared(t, data) {
			if len(items) > 1 {
				ids[id] += 2
			}
		}
	}
	for _, r := range f.Refused() {
		if r.ID == "" || ids[r.ID] > 1 {
			continue
		}
		for _, tc := range delivered {
			if tc.ID == r.ID {
				fail("%s: delivered the id of refused call %+v: %+v", api, r, tc)
			}
		}
	}
}

// responsesCallIDs maps each call_id of a Responses stream to the ids of
// the items that carry it.
func responsesCallIDs(t *testing.T, data []byte) map[string]map[string]bool {
	m := map[string]map[string]bool{}
	add := func(item gjson.Result) {
		id := item.Get("call_id").String()
		if id == "" {
			return
		}
		if m[id] == nil {
			m[id] = map[string]bool{}
		}
		m[id][item.Get("id").String()] = true
	}
	for _, ev := range sseEvents(t, data) {
		root := gjson.ParseBytes(ev.Data)
		add(root.Get("item"))
		root.Get("response.output").ForEach(func(_, item gjson.Result) bool {
			add(item)
			return true
		})
	}
	return m
}

// repeatsMembers reports whether an event of the stream has an object
// with a member name (decoded) twice.
// unrepeatedStream is stream with every event that repeats a member
// rewritten as ValidJSON rewrites it: stream itself when none does.
func unrepeatedStream(t *testing.T, stream []byte) []byte {
	var out []byte
	repeated := false
	err := sse.Each(stream, func(ev *sse.Event) error {
		if ev.HasData && streaming.Repeated(ev) {
			repeated = true
		}
		out = append(out, ev.Raw...)
		return nil
	})
	if err != nil || !repeated {
		return stream
	}
	return out
}

func repeatsMembers(t *testing.T, data []byte) bool {
	for _, ev := range sseEvents(t, data) {
		dec := json.NewDecoder(bytes.NewReader(ev.Data))
		var stack []map[string]bool
		expectKey := []bool{}
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			switch v := tok.(type) {
			case json.Delim:
				switch v {
				case '{':
					stack = append(stack, map[string]bool{})
					expectKey = append(expectKey, true)
					continue
				case '[':
					stack = append(stack, nil)
					expectKey = append(expectKey, false)
					continue
				default:
					stack, expectKey = stack[:len(stack)-1], expectKey[:len(expectKey)-1]
				}
			case string:
				if n := len(stack); n > 0 && stack[n-1] != nil && expectKey[n-1] {
					if stack[n-1][v] {
						return true
					}
					stack[n-1][v] = true
					expectKey[n-1] = false
					continue
				}
			}
			// A value ended: in an object the next string is a key.
			if n := len(stack); n > 0 && stack[n-1] != nil {
				expectKey[n-1] = true
			}
		}
	}
	return false
}

func FuzzCallFilterBody(f *testing.F) {
	for i, path := range fixturetest.Glob(f, filepath.Join(filterTestdata, "*.json")) {
		f.Add(fixturetest.ReadFile(f, path), byte(i))
	}
	for _, api := range filterAPIs {
		f.Add([]byte(cutBodies[api]), byte(0x80))
	}
	f.Fuzz(func(t *testing.T, body []byte, sel byte) {
		if len(body) > 1<<16 {
			return
		}
		allow := fuzzAllow(sel)
		cut := sel&0x80 != 0
		for _, api := range filterAPIs {
			f := newTestFilter(t, api, allow)
			if cut {
				f.NoticeCut(func(c streaming.ToolCall) string { return "cut: " + c.Name })
			}
			out, err := f.Body(body)
			if err != nil {
				if !errors.Is(err, streaming.ErrInvalidJSON) {
					t.Fatalf("%s: %v", api, err)
				}
				continue
			}
			if want, _ := streaming.Unrepeated(body); sel&3 == 0 && !cut && !bytes.Equal(out, want) {
				t.Fatalf("%s: allow all changed the body", api)
			}
			if !gjson.ValidBytes(out) {
				t.Fatalf("%s: not JSON: %q", api, out)
			}
			res, err := dialects[api].DecodeJSON(out)
			if err != nil {
				if _, inErr := dialects[api].DecodeJSON(body); inErr == nil {
					t.Fatalf("%s: the body decoded, the filtered one does not: %v", api, err)
				}
				continue
			}
			for _, tc := range res.ClientToolCalls() {
				if tc.Name != "" && !allow(tc.Name) {
					t.Fatalf("%s: delivered a call to refused tool %q", api, tc.Name)
				}
				if f.IsCut(tc.ID) {
					t.Fatalf("%s: delivered the cut call %q", api, tc.ID)
				}
			}
		}
	})
}

// filterGen builds replies from the pieces a filter must get right, in
// random order and combination: calls with and without index, id or name,
// repeated and escaped keys, events for calls never announced.
type filterGen struct {
	rng *rand.Rand
	b   bytes.Buffer
}

func (g *filterGen) pick(options ...string) string { return options[g.rng.IntN(len(options))] }

func (g *filterGen) maybe(s string) string {
	if g.rng.IntN(2) == 0 {
		return ""
	}
	return s
}

func (g *filterGen) name() string {
	return g.pick(`"Read"`, `"Bash"`, `"Write"`, `""`, `null`, `"B\u0061sh"`)
}

// key is a member name as written, now and then with an escape in it.
func (g *filterGen) key(k string) string {
	if g.rng.IntN(12) == 0 {
		return `"` + k[:1] + `\u00` + strconv.FormatInt(int64(k[1]), 16) + k[2:] + `"`
	}
	return `"` + k + `"`
}

func (g *filterGen) event(name, data string) {
	if name != "" && g.rng.IntN(6) > 0 {
		g.b.WriteString("event: " + name + "\n")
	}
	g.b.WriteString("data: " + data + "\n\n")
}

func (g *filterGen) chat() []byte {
	for range 1 + g.rng.IntN(8) {
		var choices []string
		for range 1 + g.rng.IntN(2) {
			var delta []string
			if c := g.pick("", `null`, `""`, `"Working."`); c != "" {
				delta = append(delta, `"content":`+c)
			}
			var calls []string
			for range g.rng.IntN(3) {
				var m []string
				if i := g.pick("", "0", "1", "2", `"1"`); i != "" {
					m = append(m, `"index":`+i)
				}
				if id := g.pick("", `"call_a"`, `"call_b"`, `"call_c"`); id != "" {
					m = append(m, `"id":`+id)
				}
				fn := []string{`"arguments":` + g.pick(`""`, `"{\"x\":"`, `"1}"`)}
				if g.rng.IntN(2) == 0 {
					fn = append(fn, g.key("name")+":"+g.name())
				}
				if g.rng.IntN(6) == 0 {
					m = append(m, `"type":"custom","custom":{"name":`+g.name()+`,"input":"x"}`)
				} else {
					m = append(m, `"type":"function","function":{`+strings.Join(fn, ",")+`}`)
				}
				calls = append(calls, "{"+strings.Join(m, ",")+"}")
			}
			if len(calls) > 0 {
				delta = append(delta, g.key("tool_calls")+":["+strings.Join(calls, ",")+"]")
				if g.rng.IntN(8) == 0 {
					delta = append(delta, `"tool_calls":[`+calls[0]+"]")
				}
			}
			if g.rng.IntN(8) == 0 {
				delta = append(delta, `"function_call":{"name":`+g.name()+`,"arguments":"{}"}`)
			}
			choice := `{"index":` + g.pick("0", "0", "1") + `,"delta":{` + strings.Join(delta, ",") + `}`
			if f := g.pick("", `null`, `"tool_calls"`, `"stop"`, `"function_call"`); f != "" {
				choice += `,"finish_reason":` + f
			}
			choices = append(choices, choice+"}")
		}
		chunk := `{"id":"chatcmpl-G","object":"chat.completion.chunk","created":1,"model":"m",` + g.key("choices") + `:[` + strings.Join(choices, ",") + "]"
		if g.rng.IntN(10) == 0 {
			chunk += `,"choices":[` + choices[0] + "]"
		}
		g.event("", chunk+"}")
	}
	g.event("", g.pick("[DONE]", `{"choices":[],"usage":{"prompt_tokens":1}}`))
	return g.b.Bytes()
}

func (g *filterGen) responses() []byte {
	seq := 0
	numbered := g.rng.IntN(3) > 0
	ev := func(typ, body string) {
		s := `{"type":"` + typ + `"`
		if numbered {
			s += `,"sequence_number":` + strconv.Itoa(seq)
			seq++
		}
		g.event(typ, s+","+body+"}")
	}
	item := func(status string) string {
		typ := g.pick("function_call", "function_call", "custom_tool_call", "message", "mcp_call")
		return `{"id":` + g.pick(`"fc_0"`, `"fc_1"`, `"fc_2"`) + `,"type":"` + typ + `","status":"` + status + `","arguments":"{}","input":"x","call_id":` +
			g.pick(`"call_0"`, `"call_1"`, `"call_2"`, `null`) + `,"name":` + g.name() + `}`
	}
	ev("response.created", `"response":{"id":"resp_G","status":"in_progress","output":[`+g.maybe(item("in_progress"))+`]}`)
	for range 1 + g.rng.IntN(10) {
		oi := `"output_index":` + g.pick("0", "1", "2")
		switch g.rng.IntN(5) {
		case 0:
			ev("response.output_item.added", oi+`,"item":`+item("in_progress"))
		case 1:
			ev("response.output_item.done", oi+`,"item":`+item(g.pick("completed", "incomplete")))
		case 2:
			ev(g.pick("response.function_call_arguments.delta", "response.custom_tool_call_input.delta"), oi+`,"item_id":`+g.pick(`"fc_0"`, `"fc_1"`, `"fc_9"`)+`,"delta":"{}"`)
		case 3:
			ev("response.function_call_arguments.done", oi+`,"item_id":`+g.pick(`"fc_0"`, `"fc_1"`, `"fc_9"`)+`,"arguments":"{}"`+g.maybe(`,"name":`+g.name()))
		default:
			ev("response.output_text.delta", oi+`,"item_id":"msg_0","content_index":0,"delta":"hi"`)
		}
	}
	var output []string
	for range g.rng.IntN(3) {
		output = append(output, item("completed"))
	}
	ev(g.pick("response.completed", "response.incomplete"), `"response":{"id":"resp_G","status":"completed","output":[`+strings.Join(output, ",")+`]}`)
	return g.b.Bytes()
}

func (g *filterGen) anthropic() []byte {
	g.event("message_start", `{"type":"message_start","message":{"id":"msg_G","content":[],"usage":{"input_tokens":1,"output_tokens":1}}}`)
	for range 1 + g.rng.IntN(10) {
		idx := `"index":` + g.pick("0", "1", "2", "1.0")
		switch g.rng.IntN(4) {
		case 0:
			typ := g.pick(`"tool_use"`, `"tool_use"`, `"server_tool_use"`, `"text"`, `"tool\u005fuse"`)
			g.event("content_block_start", `{"type":"content_block_start",`+idx+`,"content_block":{"type":`+typ+`,"id":`+
				g.pick(`"toolu_0"`, `"toolu_1"`, `"toolu_2"`)+`,"name":`+g.name()+`,"input":{}}}`)
		case 1:
			g.event("content_block_delta", `{"type":"content_block_delta",`+idx+`,"delta":{"type":"input_json_delta","partial_json":"{}"}}`)
		case 2:
			g.event("content_block_stop", `{"type":"content_block_stop",`+idx+`}`)
		default:
			g.event("ping", `{"type": "ping"}`)
		}
	}
	g.event("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":5}}`)
	g.event("message_stop", `{"type":"message_stop"}`)
	return g.b.Bytes()
}

// TestCallFilterGenerated runs the fuzz checks over generated replies,
// with every kind of policy.
func TestCallFilterGenerated(t *testing.T) {
	n := 400
	if testing.Short() {
		n = 50
	}
	for _, api := range filterAPIs {
		t.Run(string(api), func(t *testing.T) {
			for i := range n {
				g := &filterGen{rng: rand.New(rand.NewPCG(uint64(i), 7))}
				data := apis[api].generate(g)
				for _, sel := range []byte{0, 1, 2, 6, 10, 14} {
					checkFilterFuzz(t, api, data, sel, false, -1)
					checkFilterFuzz(t, api, data, sel, true, -1)
					checkFilterFuzz(t, api, data, sel, true, int(sel)%7)
				}
			}
		})
	}
}
