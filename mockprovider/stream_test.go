package mockprovider

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

var turnBodies = map[API]struct{ path, body string }{
	APIAnthropic: {"/v1/messages?beta=true", `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,` +
		`"messages":[{"role":"user","content":"hello"}],` +
		`"tools":[{"name":"Bash","input_schema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}]}`},
	APIChat: {"/v1/chat/completions", `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},` +
		`"messages":[{"role":"user","content":"hello"}],` +
		`"tools":[{"type":"function","function":{"name":"shell","parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}}},"required":["command"]}}}]}`},
	APIResponses: {"/v1/responses", `{"model":"gpt-4o","stream":true,"input":[{"role":"user","content":"hello"}],` +
		`"tools":[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}}]}`},
}

// streamTurns are every built-in turn that streams events.
var streamTurns = []string{"text", "tool", "parallel", "max_tokens", "max_tokens_tool", "refusal", "error",
	"disconnect", "thinking", "thinking_tool"}

// TestStreamsAreWellFormed reads every stream the mock emits with a strict
// SSE reader and checks each API's framing rules.
func TestStreamsAreWellFormed(t *testing.T) {
	for _, api := range []API{APIAnthropic, APIChat, APIResponses} {
		for _, turn := range streamTurns {
			t.Run(string(api)+"/"+turn, func(t *testing.T) {
				_, url := newMock(t, Options{})
				tb := turnBodies[api]
				resp := post(t, testContext(t), url+tb.path, tb.body, HeaderTurn, turn, "Accept-Encoding", "gzip")
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d", resp.StatusCode)
				}
				if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
					t.Errorf("Content-Type = %q", ct)
				}
				if resp.Header.Get("Cache-Control") != "no-cache" || resp.Header.Get("Content-Encoding") != "" {
					t.Errorf("Cache-Control %q, Content-Encoding %q: streams are never compressed",
						resp.Header.Get("Cache-Control"), resp.Header.Get("Content-Encoding"))
				}
				events, err := readAllEvents(resp.Body)
				if turn == "disconnect" {
					if err == nil {
						t.Fatal("disconnect: the stream ended cleanly")
					}
				} else if err != nil {
					t.Fatalf("read: %v", err)
				}
				if len(events) < 3 {
					t.Fatalf("only %d events", len(events))
				}
				switch api {
				case APIAnthropic:
					checkAnthropicStream(t, events, turn)
				case APIChat:
					checkChatStream(t, events, turn)
				case APIResponses:
					checkResponsesStream(t, events, turn)
				}
			})
		}
	}
}

func checkAnthropicStream(t *testing.T, events []sseEvent, turn string) {
	open := -1 // index of the open content block
	next := 0  // index the next block must have
	for i, ev := range events {
		if ev.name == "" || eventType(t, ev) != ev.name {
			t.Fatalf("event %d: name %q, data type %q", i, ev.name, eventType(t, ev))
		}
		var d struct {
			Index int `json:"index"`
		}
		_ = json.Unmarshal([]byte(ev.data), &d) // validated as JSON by eventType
		switch ev.name {
		case "message_start":
			if i != 0 {
				t.Errorf("message_start at %d", i)
			}
		case "ping":
			if ev.data != `{"type": "ping"}` {
				t.Errorf("ping data %q", ev.data)
			}
		case "content_block_start":
			if open != -1 || d.Index != next {
				t.Errorf("event %d: block %d starts while %d is open (next %d)", i, d.Index, open, next)
			}
			open = d.Index
			next++
		case "content_block_delta":
			if d.Index != open {
				t.Errorf("event %d: delta for block %d, open %d", i, d.Index, open)
			}
		case "content_block_stop":
			if d.Index != open {
				t.Errorf("event %d: stop for block %d, open %d", i, d.Index, open)
			}
			open = -1
		case "message_delta", "message_stop", "error":
		default:
			t.Errorf("unexpected event %q", ev.name)
		}
	}
	last := events[len(events)-1].name
	switch turn {
	case "error":
		if last != "error" {
			t.Errorf("last event %q, want error", last)
		}
	case "disconnect":
		if last != "content_block_delta" || open == -1 {
			t.Errorf("cut after %q with block open=%d, want inside a tool_use block", last, open)
		}
	default:
		if last != "message_stop" || events[len(events)-2].name != "message_delta" {
			t.Errorf("stream ends with %q, want message_delta, message_stop", last)
		}
	}
}

func checkChatStream(t *testing.T, events []sseEvent, turn string) {
	id := ""
	for i, ev := range events {
		if ev.name != "" {
			t.Fatalf("event %d has an event: line %q", i, ev.name)
		}
		if ev.data == "[DONE]" {
			if i != len(events)-1 {
				t.Errorf("[DONE] at %d of %d", i, len(events))
			}
			continue
		}
		var c map[string]json.RawMessage
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if _, isErr := c["error"]; isErr {
			if turn != "error" || i != len(events)-1 {
				t.Errorf("error chunk at %d in a %s turn", i, turn)
			}
			continue
		}
		var chunkID string
		_ = json.Unmarshal(c["id"], &chunkID)
		if id == "" {
			id = chunkID
		}
		if chunkID != id || string(c["object"]) != `"chat.completion.chunk"` {
			t.Errorf("event %d: id %s object %s", i, c["id"], c["object"])
		}
		if _, ok := c["usage"]; !ok {
			t.Errorf("event %d: no usage key although include_usage is set", i)
		}
	}
	last := events[len(events)-1].data
	switch turn {
	case "error":
		if !strings.HasPrefix(last, `{"error":`) {
			t.Errorf("last event %s, want the error object", last)
		}
	case "disconnect":
		if last == "[DONE]" {
			t.Error("a cut stream has [DONE]")
		}
	default:
		usage := events[len(events)-2].data
		if last != "[DONE]" || !strings.Contains(usage, `"choices":[]`) || !strings.Contains(usage, `"prompt_tokens"`) {
			t.Errorf("stream ends with %s, %s; want the usage chunk and [DONE]", usage, last)
		}
	}
}

func checkResponsesStream(t *testing.T, events []sseEvent, turn string) {
	for i, ev := range events {
		if ev.name == "" || eventType(t, ev) != ev.name {
			t.Fatalf("event %d: name %q, data type %q", i, ev.name, eventType(t, ev))
		}
		var d struct {
			Seq *int `json:"sequence_number"`
		}
		_ = json.Unmarshal([]byte(ev.data), &d)
		if d.Seq == nil || *d.Seq != i {
			t.Errorf("event %d (%s): sequence_number %v", i, ev.name, d.Seq)
		}
	}
	if events[0].name != "response.created" || events[1].name != "response.in_progress" {
		t.Errorf("starts with %s, %s", events[0].name, events[1].name)
	}
	last := events[len(events)-1].name
	want := map[string]string{"error": "response.failed", "max_tokens": "response.incomplete", "max_tokens_tool": "response.incomplete"}[turn]
	switch {
	case turn == "disconnect":
		if last != "response.function_call_arguments.delta" {
			t.Errorf("cut after %s, want inside a function call", last)
		}
	case want != "":
		if last != want {
			t.Errorf("last event %s, want %s", last, want)
		}
	default:
		if last != "response.completed" {
			t.Errorf("last event %s, want response.completed", last)
		}
	}
	if turn == "error" && events[len(events)-2].name != "error" {
		t.Errorf("response.failed not preceded by error")
	}
}

// TestChatUsageOnlyWhenAsked checks the include_usage rule on the wire: no
// usage key and no empty-choices chunk unless the client asked.
func TestChatUsageOnlyWhenAsked(t *testing.T) {
	_, url := newMock(t, Options{})
	resp := post(t, testContext(t), url+"/v1/chat/completions",
		`{"model":"gpt-4o","stream":true,"stream_options":{"include_obfuscation":false},"messages":[{"role":"user","content":"hi"}]}`)
	events, err := readAllEvents(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		if strings.Contains(ev.data, `"usage"`) || strings.Contains(ev.data, `"choices":[]`) || strings.Contains(ev.data, `"obfuscation"`) {
			t.Errorf("unexpected chunk %s", ev.data)
		}
	}
	if events[len(events)-1].data != "[DONE]" {
		t.Error("no [DONE]")
	}
}

// TestArgumentsSplitInsideEscapes checks that streamed tool arguments are
// cut at arbitrary points, including right after a backslash.
func TestArgumentsSplitInsideEscapes(t *testing.T) {
	spec := `{"kind":"tool","tools":[{"name":"Bash","input":{"command":"printf \"a\\tb\\n\" | grep \"a\""}}]}`
	extract := map[API]func(data string) (string, bool){
		APIAnthropic: func(data string) (string, bool) {
			var v struct {
				Delta struct {
					PartialJSON string `json:"partial_json"`
				} `json:"delta"`
			}
			_ = json.Unmarshal([]byte(data), &v)
			return v.Delta.PartialJSON, strings.Contains(data, `"input_json_delta"`)
		},
		APIChat: func(data string) (string, bool) {
			var v struct {
				Choices []struct {
					Delta struct {
						ToolCalls []struct {
							Function struct{ Arguments string } `json:"function"`
						} `json:"tool_calls"`
					} `json:"delta"`
				} `json:"choices"`
			}
			_ = json.Unmarshal([]byte(data), &v)
			if len(v.Choices) == 0 || len(v.Choices[0].Delta.ToolCalls) == 0 {
				return "", false
			}
			return v.Choices[0].Delta.ToolCalls[0].Function.Arguments, true
		},
		APIResponses: func(data string) (string, bool) {
			var v struct{ Type, Delta string }
			_ = json.Unmarshal([]byte(data), &v)
			return v.Delta, v.Type == "response.function_call_arguments.delta"
		},
	}
	for api, get := range extract {
		t.Run(string(api), func(t *testing.T) {
			_, url := newMock(t, Options{})
			tb := turnBodies[api]
			resp := post(t, testContext(t), url+tb.path, tb.body, HeaderTurn, spec)
			events, err := readAllEvents(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			var frags []string
			for _, ev := range events {
				if f, ok := get(ev.data); ok {
					frags = append(frags, f)
				}
			}
			joined := strings.Join(frags, "")
			if !jsonEqual(t, joined, `{"command":"printf \"a\\tb\\n\" | grep \"a\""}`) {
				t.Fatalf("fragments join to %s", joined)
			}
			nonEmpty, inEscape := 0, false
			for _, f := range frags {
				if f != "" {
					nonEmpty++
				}
				if strings.HasSuffix(f, `\`) {
					inEscape = true
				}
			}
			if nonEmpty < 5 || !inEscape {
				t.Errorf("fragments %q: want several, one ending inside an escape", frags)
			}
		})
	}
}

// gatedSleep replaces the timer: each wait announces itself on waiting and
// returns when the test sends on release (or the request is canceled).
type gatedSleep struct {
	waiting chan struct{}
	release chan struct{}
}

func newGatedSleep() *gatedSleep {
	return &gatedSleep{waiting: make(chan struct{}), release: make(chan struct{})}
}

func (g *gatedSleep) Sleep(ctx context.Context, _ time.Duration) error {
	select {
	case g.waiting <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func within(t *testing.T, what string, ch chan struct{}, send bool) {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	if send {
		select {
		case ch <- struct{}{}:
		case <-timer.C:
			t.Fatalf("timed out: %s", what)
		}
		return
	}
	select {
	case <-ch:
	case <-timer.C:
		t.Fatalf("timed out: %s", what)
	}
}

// TestEventsAreFlushedOneByOne holds the server between events and checks
// that the client already has event k while event k+1 is not yet written.
func TestEventsAreFlushedOneByOne(t *testing.T) {
	for _, api := range []API{APIAnthropic, APIChat, APIResponses} {
		t.Run(string(api), func(t *testing.T) {
			gate := newGatedSleep()
			s, url := newMock(t, Options{Sleep: gate.Sleep})
			tb := turnBodies[api]
			resp := post(t, testContext(t), url+tb.path, tb.body, HeaderTurn, `{"kind":"text","text":"one two three four five six","event_delay":"50ms"}`)
			r := bufio.NewReader(resp.Body)
			for k := 0; ; k++ {
				ev, err := readEvent(r)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("event %d: %v", k, err)
				}
				if k > 200 {
					t.Fatal("too many events")
				}
				last := ev.name == "message_stop" || ev.name == "response.completed" || ev.data == "[DONE]"
				if last {
					continue
				}
				// The server announces its wait only after recording event k.
				within(t, fmt.Sprintf("server to wait after event %d", k), gate.waiting, false)
				if n := len(s.Requests()[0].EventTimes); n != k+1 {
					t.Fatalf("client holds event %d while the server recorded %d events", k, n)
				}
				within(t, "release", gate.release, true)
			}
			rec := onlyRequest(t, s)
			if rec.Canceled || len(rec.EventTimes) < 5 {
				t.Fatalf("record: canceled %v, %d events", rec.Canceled, len(rec.EventTimes))
			}
			for i := 1; i < len(rec.EventTimes); i++ {
				if !rec.EventTimes[i].After(rec.EventTimes[i-1]) {
					t.Errorf("event times out of order at %d", i)
				}
			}
			if rec.EventTimes[0].Before(rec.Started) || rec.Ended.Before(rec.EventTimes[len(rec.EventTimes)-1]) {
				t.Error("event times outside Started..Ended")
			}
		})
	}
}

// TestClientCancelMidStream cancels the client after two events and
// checks the mock records the cancel and writes nothing more.
func TestClientCancelMidStream(t *testing.T) {
	gate := newGatedSleep()
	s, url := newMock(t, Options{Sleep: gate.Sleep})
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	tb := turnBodies[APIAnthropic]
	resp := post(t, ctx, url+tb.path, tb.body, HeaderTurn, `{"kind":"text","event_delay":"1s"}`)
	r := bufio.NewReader(resp.Body)
	for k := range 2 {
		if _, err := readEvent(r); err != nil {
			t.Fatalf("event %d: %v", k, err)
		}
		within(t, "server to wait", gate.waiting, false)
		if k == 0 {
			within(t, "release", gate.release, true)
		}
	}
	cancel()
	rec := onlyRequest(t, s)
	if !rec.Canceled || rec.Aborted || len(rec.EventTimes) != 2 {
		t.Errorf("canceled %v aborted %v events %d, want canceled after 2 events", rec.Canceled, rec.Aborted, len(rec.EventTimes))
	}
}

func TestFirstByteDelay(t *testing.T) {
	gate := newGatedSleep()
	s, url := newMock(t, Options{Sleep: gate.Sleep})
	done := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
		req.Header.Set("Authorization", "Bearer k")
		req.Header.Set(HeaderTurn, `{"first_byte_delay":"2s"}`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			resp = nil
		}
		done <- resp
	}()
	within(t, "first byte wait", gate.waiting, false)
	select {
	case <-done:
		t.Fatal("headers arrived before the first-byte delay ended")
	default:
	}
	within(t, "release", gate.release, true)
	resp := <-done
	if resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("response %v", resp)
	}
	resp.Body.Close()
	if rec := onlyRequest(t, s); rec.Turn != "header" {
		t.Errorf("turn %q", rec.Turn)
	}
}
