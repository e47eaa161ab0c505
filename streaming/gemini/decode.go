package gemini

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/sse"
)

// The Gemini decoder. Every event of a stream is a whole
// GenerateContentResponse: candidates whose content parts are text (a
// thought summary when "thought" is true), whole function calls, or
// server-run code; a finishReason on the last chunk; usageMetadata as a
// running total, the last one authoritative. There is no terminal event:
// the reply is done at its finishReason (or a prompt blocked before any
// candidate).

var _ streaming.Decoder = (*decoder)(nil)

type decoder struct {
	res      streaming.Result
	errored  bool // an error object arrived
	finished bool // Finish ran
	calls    map[int]int
}

func newDecoder() *decoder {
	return &decoder{res: streaming.Result{API: streaming.APIGemini}}
}

// Result is the reply so far.
func (d *decoder) Result() *streaming.Result { return &d.res }

// Finish marks the reply truncated when neither a finishReason nor an
// error came.
func (d *decoder) Finish() *streaming.Result {
	if !d.finished {
		d.finished = true
		d.res.Truncated = !d.res.Done && !d.errored
	}
	return &d.res
}

// Decode handles one SSE event of a streamGenerateContent?alt=sse stream.
func (d *decoder) Decode(ev *sse.Event) {
	if !ev.HasData {
		return
	}
	streaming.ValidJSON(ev)
	data := bytes.TrimSpace(ev.Data)
	if len(data) == 0 {
		return
	}
	d.res.Ambiguous = d.res.Ambiguous || ev.JSON == sse.JSONRepeated
	valid := ev.JSON != sse.JSONInvalid
	if len(data) != len(ev.Data) {
		valid = gjson.ValidBytes(data)
	}
	root := gjson.Parse(jsonscan.View(data))
	if !valid || !root.IsObject() {
		d.res.AddUnparsed(fmt.Errorf("%w: gemini chunk of %d bytes", streaming.ErrInvalidJSON, len(data)))
		return
	}
	d.chunk(root)
}

// chunk handles one GenerateContentResponse (a chunk, or a whole reply).
func (d *decoder) chunk(root gjson.Result) {
	if d.calls == nil {
		d.calls = map[int]int{}
	}
	var id, model, cands, usage, feedback, errv gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "responseId":
			id = v
		case "modelVersion":
			model = v
		case "candidates":
			cands = v
		case "usageMetadata":
			usage = v
		case "promptFeedback":
			feedback = v
		case "error":
			errv = v
		}
		return true
	})
	if d.res.MessageID == "" && id.Type == gjson.String && id.Str != "" {
		d.res.MessageID = strings.Clone(id.Str)
	}
	if d.res.Model == "" && model.Type == gjson.String && model.Str != "" {
		d.res.Model = strings.Clone(model.Str)
	}
	if errv.Exists() {
		d.providerError(errv)
		return
	}
	if cands.IsArray() {
		pos := 0
		cands.ForEach(func(_, c gjson.Result) bool {
			if c.IsObject() {
				d.candidate(c, candidateIndex(c, pos), id.Str)
			}
			pos++
			return true
		})
	}
	if u, ok := readUsage(usage); ok {
		d.res.Usage = u
		d.res.UsageSeen, d.res.UsageFinal = true, true
	}
	if br := feedback.Get("blockReason"); br.Type == gjson.String && br.Str != "" && len(d.res.Stops) == 0 {
		// The prompt was blocked: no candidate comes.
		d.res.Stops = append(d.res.Stops, streaming.Stop{Reason: streaming.StopContentFilter, Raw: "promptFeedback:" + strings.Clone(br.Str)})
		d.res.Done = true
	}
}

// candidateIndex is a candidate's "index", else its position.
func candidateIndex(c gjson.Result, pos int) int {
	if i := c.Get("index"); i.Type == gjson.Number && i.Int() >= 0 && i.Int() < 1<<16 {
		return int(i.Int())
	}
	return pos
}

func (d *decoder) candidate(c gjson.Result, choice int, responseID string) {
	parts := c.Get("content.parts")
	parts.ForEach(func(_, p gjson.Result) bool {
		if !p.IsObject() {
			return true
		}
		if fc := p.Get("functionCall"); fc.Exists() {
			first := choice == 0 && d.calls[0] == 0
			d.call(fc, choice, responseID)
			if sig := p.Get("thoughtSignature"); first && d.calls[0] == 1 && sig.Type == gjson.String && sig.Str != "" {
				d.res.CallSignature = strings.Clone(sig.Str)
			}
			return true
		}
		if t := p.Get("text"); t.Type == gjson.String {
			n := int64(len(t.Str))
			d.res.OutputBytes += n
			if !p.Get("thought").Bool() {
				d.res.TextBytes += n
			}
		}
		if code := p.Get("executableCode.code"); code.Type == gjson.String {
			d.res.OutputBytes += int64(len(code.Str))
		}
		return true
	})
	if fr := c.Get("finishReason"); fr.Type == gjson.String && fr.Str != "" {
		d.stop(choice, fr.Str)
	}
}

// call records one functionCall part: whole, as the Gemini API sends it.
// A part that streams its arguments (Vertex's partialArgs, willContinue)
// is not one the decoder assembles: it counts as unparsed, and the call
// filter withholds it.
func (d *decoder) call(fc gjson.Result, choice int, responseID string) {
	name := fc.Get("name")
	if !fc.IsObject() || Streamed(fc) || name.Type != gjson.String || name.Str == "" {
		d.res.AddUnparsed(fmt.Errorf("%w: gemini functionCall part without a whole call", streaming.ErrInvalidJSON))
		return
	}
	n := d.calls[choice]
	d.calls[choice] = n + 1
	args := fc.Get("args")
	tc := streaming.ToolCall{
		Choice: choice, Index: n, Type: CallType,
		ID:       CallID(fc.Get("id"), responseID, choice, n, name.Str),
		Name:     strings.Clone(name.Str),
		Complete: true,
	}
	if args.IsObject() {
		tc.Arguments = []byte(args.Raw)
	} else {
		tc.Arguments = []byte("{}")
	}
	d.res.OutputBytes += int64(len(args.Raw))
	d.res.ToolCalls = append(d.res.ToolCalls, tc)
}

// stop records a candidate's finishReason. STOP is also the reason of a
// reply that calls tools: a candidate with a call stopped for tool use.
func (d *decoder) stop(choice int, raw string) {
	reason := StopReason(raw)
	if reason == streaming.StopEndTurn && d.calls[choice] > 0 {
		reason = streaming.StopToolUse
	}
	d.res.Stops = append(d.res.Stops, streaming.Stop{Choice: choice, Reason: reason, Raw: strings.Clone(raw)})
	d.res.Done = true
}

// StopReason normalizes a finishReason.
func StopReason(raw string) streaming.StopReason {
	switch raw {
	case "STOP":
		return streaming.StopEndTurn
	case "MAX_TOKENS":
		return streaming.StopMaxTokens
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "LANGUAGE":
		return streaming.StopContentFilter
	case "MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL":
		return streaming.StopError
	}
	return streaming.StopReason(raw)
}

func (d *decoder) providerError(v gjson.Result) {
	d.errored = true
	pe := streaming.ProviderError{Raw: []byte(v.Raw)}
	if v.IsObject() {
		pe.Type = strings.Clone(v.Get("status").String())
		if pe.Type == "" {
			pe.Type = strings.Clone(v.Get("code").String())
		}
		pe.Message = strings.Clone(v.Get("message").String())
	} else {
		pe.Message = strings.Clone(v.String())
	}
	d.res.Errors = append(d.res.Errors, pe)
}

// readUsage reads usageMetadata: promptTokenCount counts the cached
// content (cachedContentTokenCount) and not the tool-use prompt
// (toolUsePromptTokenCount, billed as input); candidatesTokenCount leaves
// out the thinking (thoughtsTokenCount), billed as output. A report
// without any count (Vertex's {"trafficType":...} on every chunk but the
// last) is none.
func readUsage(u gjson.Result) (streaming.Usage, bool) {
	if !u.IsObject() {
		return streaming.Usage{}, false
	}
	var prompt, cached, tool, cands, thoughts int64
	seen := false
	u.ForEach(func(k, v gjson.Result) bool {
		if v.Type != gjson.Number {
			return true
		}
		n := max(v.Int(), 0)
		switch k.Str {
		case "promptTokenCount":
			prompt, seen = n, true
		case "cachedContentTokenCount":
			cached, seen = n, true
		case "toolUsePromptTokenCount":
			tool, seen = n, true
		case "candidatesTokenCount":
			cands, seen = n, true
		case "thoughtsTokenCount":
			thoughts, seen = n, true
		case "totalTokenCount":
			seen = true
		}
		return true
	})
	if !seen {
		return streaming.Usage{}, false
	}
	cached = min(cached, prompt)
	return streaming.Usage{
		InputTokens:       prompt - cached + tool,
		CachedInputTokens: cached,
		OutputTokens:      cands + thoughts,
		ReasoningTokens:   thoughts,
	}, true
}

// CallType is the ToolCall.Type of a Gemini function call.
const CallType = "functionCall"

// Streamed reports whether a functionCall part streams its arguments
// (Vertex's partialArgs and willContinue), which gatekeeper does not
// assemble.
func Streamed(fc gjson.Result) bool {
	return fc.Get("partialArgs").Exists() || fc.Get("willContinue").Exists()
}

// maxCallID bounds a provider's call id kept as it is.
const maxCallID = 256

// CallID is the id gatekeeper knows a call by: the part's own
// functionCall.id when it has one, else one derived from the reply's
// responseId, the candidate, the call's position among the candidate's
// calls and its name, which names it uniquely and the same way in a
// stream, in its assembled body and in a decoded body.
func CallID(id gjson.Result, responseID string, choice, n int, name string) string {
	if id.Type == gjson.String && id.Str != "" && len(id.Str) <= maxCallID {
		return strings.Clone(id.Str)
	}
	h := sha256.New()
	h.Write([]byte(responseID))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, int64(choice), 10))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, int64(n), 10))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return "gk-call-" + hex.EncodeToString(h.Sum(nil)[:12])
}

// decodeJSON decodes a whole generateContent reply body.
func decodeJSON(body []byte) (*streaming.Result, error) {
	body, repeated := streaming.Unrepeated(body)
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' || !gjson.ValidBytes(trimmed) {
		return nil, fmt.Errorf("%w: gemini reply body", streaming.ErrInvalidJSON)
	}
	d := newDecoder()
	d.res.Ambiguous = repeated
	d.chunk(gjson.Parse(jsonscan.View(trimmed)))
	d.res.Done = true // a body is a whole reply, an error or not
	return &d.res, nil
}
