package gemini_test

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/gemini"
	"gatekeeper/streaming/sse"
)

func refusal(c streaming.ToolCall) string { return "gatekeeper withheld a call to " + c.Name }

// filter runs stream through f event by event.
func filter(t testing.TB, f *streaming.CallFilter, stream []byte) []byte {
	t.Helper()
	var out []byte
	if err := sse.Each(stream, func(ev *sse.Event) error {
		out = f.AppendEvent(out, *ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// sdkLine is how the Gemini SDKs find an event in a stream: one "data: "
// line and a blank line, nothing else.
var sdkLine = regexp.MustCompile(`^\s*data: (.*)(?:\n\n|\r\r|\r\n\r\n)`)

// sdkChunks reads a stream as the Gemini SDKs do, failing where they
// would stall or fail.
func sdkChunks(t testing.TB, stream []byte) []gjson.Result {
	t.Helper()
	var out []gjson.Result
	buf := string(stream)
	for buf != "" {
		m := sdkLine.FindStringSubmatch(buf)
		if m == nil {
			t.Fatalf("the SDK's parser stalls at %q", buf)
		}
		if !gjson.Valid(m[1]) {
			t.Fatalf("chunk is not JSON: %q", m[1])
		}
		out = append(out, gjson.Parse(m[1]))
		buf = buf[len(m[0]):]
	}
	return out
}

func TestFilterRefuses(t *testing.T) {
	d := gemini.Dialect{}
	f, err := d.NewCallFilter(func(name string) bool { return name != "run_shell_command" }, refusal)
	if err != nil {
		t.Fatal(err)
	}
	out := filter(t, f, read(t, "two-calls-finish.sse"))
	res := streamtest.MustDecode(t, d, out)
	if len(res.ToolCalls) != 1 || res.ToolCalls[0].Name != "read_file" || res.StopReason() != streaming.StopToolUse {
		t.Fatalf("delivered %+v, stop %s", res.ToolCalls, res.StopReason())
	}
	refused := f.Refused()
	if len(refused) != 1 || refused[0].Name != "run_shell_command" || refused[0].ID != "own-id-7" {
		t.Fatalf("refused %+v", refused)
	}
	chunks := sdkChunks(t, out)
	parts := chunks[len(chunks)-1].Get("candidates.0.content.parts").Array()
	if len(parts) != 3 || parts[1].Get("text").Str != "gatekeeper withheld a call to run_shell_command" {
		t.Fatalf("parts %v", parts)
	}
	if !bytes.HasPrefix(out, read(t, "two-calls-finish.sse")[:100]) {
		t.Error("the first chunk, with no call, did not go out as it came")
	}

	// Every call refused: the reply reads as text, stopped at STOP.
	f, _ = d.NewCallFilter(func(string) bool { return false }, refusal)
	res = streamtest.MustDecode(t, d, filter(t, f, read(t, "call.sse")))
	if len(res.ToolCalls) != 0 || res.StopReason() != streaming.StopEndTurn || len(f.Refused()) != 1 {
		t.Fatalf("calls %+v stop %s refused %+v", res.ToolCalls, res.StopReason(), f.Refused())
	}

	// Vertex's streamed call parts are withheld: no grant can judge them.
	f, _ = d.NewCallFilter(func(string) bool { return true }, refusal)
	out = filter(t, f, read(t, "vertex-partial-args.sse"))
	if bytes.Contains(out, []byte("functionCall")) {
		t.Errorf("a streamed call part went out: %s", out)
	}
}

func TestFilterHold(t *testing.T) {
	d := gemini.Dialect{}
	stream := read(t, "call.sse")
	f, _ := d.NewCallFilter(func(string) bool { return true }, refusal)
	f.Hold()
	var out []byte
	n := 0
	_ = sse.Each(stream, func(ev *sse.Event) error {
		out = f.AppendEvent(out, *ev)
		n++
		if n == 1 && (len(out) > 0 || !f.Holding()) {
			t.Errorf("the call went out before the finish: %q", out)
		}
		return nil
	})
	if f.Holding() || !bytes.Equal(out, stream) {
		t.Fatalf("at the finish the stream is not delivered as it came:\n%s", out)
	}

	// A call in a chunk with text: the text goes on, the call waits.
	stream = []byte("data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Looking.\"},{\"functionCall\":{\"name\":\"ls\",\"args\":{}}}]},\"index\":0}],\"responseId\":\"r1\"}\n\n" +
		"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\" More.\"}]},\"index\":0}],\"responseId\":\"r1\"}\n\n" +
		"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"\"}]},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":3,\"candidatesTokenCount\":4},\"responseId\":\"r1\"}\n\n")
	f, _ = d.NewCallFilter(func(string) bool { return true }, refusal)
	f.Hold()
	var first []byte
	i := 0
	out = nil
	_ = sse.Each(stream, func(ev *sse.Event) error {
		out = f.AppendEvent(out, *ev)
		if i == 1 {
			first = bytes.Clone(out)
		}
		i++
		return nil
	})
	if bytes.Contains(first, []byte("functionCall")) || !bytes.Contains(first, []byte("Looking.")) || bytes.Contains(first, []byte("More.")) {
		t.Fatalf("before the finish the agent has %s", first)
	}
	res := streamtest.MustDecode(t, d, out)
	if len(res.ToolCalls) != 1 || res.StopReason() != streaming.StopToolUse || !strings.Contains(string(out), "Looking.") {
		t.Fatalf("at the finish: %+v\n%s", res, out)
	}
	sdkChunks(t, out)

	// End drops the held call and ends with the API's error chunk.
	f, _ = d.NewCallFilter(func(string) bool { return true }, refusal)
	f.Hold()
	out = nil
	_ = sse.Each(stream, func(ev *sse.Event) error {
		if !bytes.Contains(ev.Data, []byte("finishReason")) {
			out = f.AppendEvent(out, *ev)
		}
		return nil
	})
	out = f.End(out, "trajectory_canceled", "canceled by an operator")
	chunks := sdkChunks(t, out)
	last := chunks[len(chunks)-1]
	if last.Get("error.status").Str != "ABORTED" || last.Get("error.code").Int() != 409 || bytes.Contains(out, []byte("functionCall")) {
		t.Fatalf("End gave %s", out)
	}
	if w := f.Withheld(); len(w) != 1 || w[0].Name != "ls" {
		t.Fatalf("withheld %+v", w)
	}
	if !strings.Contains(string(out), "More.") {
		t.Errorf("what came after the call was lost: %s", out)
	}
}

func TestFilterBody(t *testing.T) {
	d := gemini.Dialect{}
	body := []byte(`{"candidates":[{"content":{"parts":[{"functionCall":{"name":"run_shell_command","args":{"command":"ls"}},"thoughtSignature":"sig"}],"role":"model"},"finishReason":"STOP","index":0}],"responseId":"b1"}`)
	f, _ := d.NewCallFilter(func(string) bool { return false }, refusal)
	out, err := f.Body(body)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.DecodeJSON(out)
	if err != nil || len(res.ToolCalls) != 0 || gjson.GetBytes(out, "candidates.0.content.parts.0.text").Str != "gatekeeper withheld a call to run_shell_command" {
		t.Fatalf("body %s: %+v %v", out, res, err)
	}
	f, _ = d.NewCallFilter(func(string) bool { return true }, refusal)
	if out, _ := f.Body(body); !bytes.Equal(out, body) {
		t.Errorf("a body with nothing to withhold changed: %s", out)
	}
}

// FuzzGeminiFilter: whatever the stream, what a filter that refuses every
// call lets through decodes to no call, and what it gives is read by the
// Gemini SDKs' parser wherever the stream was.
func FuzzGeminiFilter(f *testing.F) {
	streamtest.AddStreamSeeds(f, testdata)
	f.Fuzz(func(t *testing.T, data []byte, hold uint64) {
		if len(data) > 1<<14 {
			return
		}
		d := gemini.Dialect{}
		cf, _ := d.NewCallFilter(func(string) bool { return false }, refusal)
		if hold%2 == 1 {
			cf.Hold()
		}
		var out []byte
		if err := sse.Each(data, func(ev *sse.Event) error {
			out = cf.AppendEvent(out, *ev)
			return nil
		}); err != nil {
			return
		}
		res := streamtest.MustDecode(t, d, out)
		for _, c := range res.ToolCalls {
			t.Fatalf("a refused call got through: %+v\n%s", c, out)
		}
	})
}

// TestFilterRepeatedMember: a chunk that repeats a member goes to the agent
// in the one reading the decoders read (the last name); under a grant no
// call of such a reply is let through, read-only or not.
func TestFilterRepeatedMember(t *testing.T) {
	d := gemini.Dialect{}
	stream := []byte("data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"read_file\",\"name\":\"run_shell_command\",\"args\":{}}}]},\"finishReason\":\"STOP\"}],\"responseId\":\"r\"}\n\n")
	f, _ := d.NewCallFilter(func(n string) bool { return n == "run_shell_command" }, refusal)
	out := filter(t, f, stream)
	if !f.Ambiguous() || bytes.Contains(out, []byte("read_file")) {
		t.Fatalf("ambiguous %v, out %s", f.Ambiguous(), out)
	}
	if res := streamtest.MustDecode(t, d, out); len(res.ToolCalls) != 1 || res.ToolCalls[0].Name != "run_shell_command" {
		t.Fatalf("the agent reads %+v", res.ToolCalls)
	}
	f, _ = d.NewCallFilter(func(string) bool { return true }, refusal)
	f.Grant()
	out = filter(t, f, stream)
	if res := streamtest.MustDecode(t, d, out); len(res.ToolCalls) != 0 || len(f.Refused()) != 1 || !f.Refused()[0].Ambiguous {
		t.Fatalf("under a grant: %+v, refused %+v", res.ToolCalls, f.Refused())
	}
}
