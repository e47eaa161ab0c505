package proxy_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLongHeldCallKeepsTheAgentAlive: a call whose input streams for
// longer than approvals.keepalive holds every event after its first, pings
// included, so that the agent gets them in the provider's order; meanwhile
// the agent gets gatekeeper's keepalive, a message_delta its SDK yields,
// and with those taken out it has the provider's bytes.
func TestLongHeldCallKeepsTheAgentAlive(t *testing.T) {
	var stream bytes.Buffer
	frame := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	head := frame("message_start", `{"type":"message_start","message":{"id":"msg_long","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":3}}}`) +
		frame("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`) +
		frame("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Writing the file."}}`) +
		frame("content_block_stop", `{"type":"content_block_stop","index":0}`)
	stream.WriteString(head)
	var events []string
	events = append(events, frame("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_long","name":"Write","input":{}}}`))
	events = append(events, frame("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"content\": \""}}`))
	for i := range 200 {
		if i%50 == 25 {
			events = append(events, frame("ping", `{"type": "ping"}`))
		}
		events = append(events, frame("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"line %d "}}`, i)))
	}
	events = append(events,
		frame("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"}"}}`),
		frame("content_block_stop", `{"type":"content_block_stop","index":1}`),
		frame("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":900}}`),
		frame("message_stop", `{"type":"message_stop"}`))
	for _, ev := range events {
		stream.WriteString(ev)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		f := w.(http.Flusher)
		_, _ = w.Write([]byte(head))
		f.Flush()
		// One event per read: the call's input takes many of
		// gatekeeper's clock readings to stream.
		for _, ev := range events {
			if _, err := w.Write([]byte(ev)); err != nil {
				return
			}
			f.Flush()
			time.Sleep(200 * time.Microsecond)
		}
	}))
	defer up.Close()
	e := newEnv(t, envOpts{upstream: up.URL, limits: "approvals:\n  keepalive: 20ms"})
	body := `{"model":"claude-sonnet-4-5","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"write it"}]}`
	resp := e.do(t, "POST", "/t/long-held/anthropic/v1/messages", body, "x-api-key", vkA)
	got := readAll(t, resp)

	alive := frame("message_delta", `{"type":"message_delta","delta":{"stop_reason":null,"stop_sequence":null},"usage":{"output_tokens":3}}`)
	n := strings.Count(string(got), alive)
	if n == 0 {
		t.Fatalf("no keepalive while the call was held:\n%.2000s", got)
	}
	if at, call := strings.Index(string(got), alive), strings.Index(string(got), "toolu_long"); at < len(head) || at > call {
		t.Errorf("the first keepalive is at %d, want it after the text (%d) and before the call (%d)", at, len(head), call)
	}
	if rest := strings.ReplaceAll(string(got), alive, ""); rest != stream.String() {
		t.Errorf("without its %d keepalives the agent got %d bytes that are not the provider's %d", n, len(rest), stream.Len())
	}
}

// TestSilentProviderHeldCallKeepsTheAgentAlive: the provider starts a
// call, which the filter holds back, and then sends nothing. The agent
// must still get gatekeeper's keepalive every approvals.keepalive:
// without gatekeeper it would have had the call's first event, and its
// watchdog counts from its last byte. The provider goes on only once the
// agent has had a keepalive (or after 10 s, and the test fails).
func TestSilentProviderHeldCallKeepsTheAgentAlive(t *testing.T) {
	frame := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	head := frame("message_start", `{"type":"message_start","message":{"id":"msg_quiet","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":3}}}`) +
		frame("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_quiet","name":"Write","input":{}}}`) +
		frame("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"content\": \"a"}}`)
	tail := frame("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"b\"}"}}`) +
		frame("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		frame("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":20}}`) +
		frame("message_stop", `{"type":"message_stop"}`)
	resume := make(chan struct{})
	var resumeOnce sync.Once
	var resumed atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		_, _ = w.Write([]byte(head))
		w.(http.Flusher).Flush()
		select {
		case <-resume:
		case <-time.After(10 * time.Second):
		case <-r.Context().Done():
			return
		}
		resumed.Store(true)
		_, _ = w.Write([]byte(tail))
	}))
	defer up.Close()
	defer resumeOnce.Do(func() { close(resume) })
	e := newEnv(t, envOpts{upstream: up.URL, limits: "approvals:\n  keepalive: 20ms"})
	body := `{"model":"claude-sonnet-4-5","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"write it"}]}`
	resp := e.do(t, "POST", "/t/quiet-held/anthropic/v1/messages", body, "x-api-key", vkA)
	defer resp.Body.Close()

	alive := frame("message_delta", `{"type":"message_delta","delta":{"stop_reason":null,"stop_sequence":null},"usage":{"output_tokens":3}}`)
	var got []byte
	buf := make([]byte, 4096)
	seen := false
	for {
		n, err := resp.Body.Read(buf)
		got = append(got, buf[:n]...)
		if !seen && strings.Contains(string(got), alive) {
			seen = true
			if resumed.Load() {
				t.Fatal("the first keepalive came only once the provider spoke again")
			}
			resumeOnce.Do(func() { close(resume) })
		}
		if err != nil {
			break
		}
	}
	if !strings.Contains(string(got), alive) {
		t.Fatalf("no keepalive while the provider was silent:\n%.2000s", got)
	}
	if rest := strings.ReplaceAll(string(got), alive, ""); rest != head+tail {
		t.Errorf("without its keepalives the agent got:\n%s\nwant the provider's:\n%s", rest, head+tail)
	}
}
