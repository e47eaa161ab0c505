package chat

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callfilter"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/reshape"
	"gatekeeper/streaming/sse"
)

// chatStream is what a splice reads of a whole Chat stream.
type chatStream struct {
	stop   int            // the first chunk carrying a finish_reason, -1 for none
	usage  string         // the last usage object, "" for none
	ids    []jsonscan.Set // id, created and model of the first chunk with an id
	failed bool           // a chunk carries an error
}

func readStream(evs []reshape.Event) chatStream {
	s := chatStream{stop: -1}
	for i := range evs {
		js, ok, _ := evs[i].JSON(streaming.APIChat)
		if !ok {
			continue
		}
		if s.stop < 0 && slices.ContainsFunc(gjson.Get(js, "choices").Array(), func(ch gjson.Result) bool {
			return ch.Get("finish_reason").Type == gjson.String
		}) {
			s.stop = i
		}
		if u := gjson.Get(js, "usage"); u.IsObject() {
			s.usage = u.Raw
		}
		if len(s.ids) == 0 && gjson.Get(js, "id").Str != "" {
			s.ids = jsonscan.Members(nil, js, "id", "created", "model")
		}
		s.failed = s.failed || gjson.Get(js, "error").Exists()
	}
	return s
}

// startChunk reports whether a chunk only opens the reply: a role and
// empty content, nothing else.
func startChunk(js string) bool {
	chs := gjson.Get(js, "choices").Array()
	if len(chs) == 0 || gjson.Get(js, "usage").IsObject() {
		return false
	}
	for _, ch := range chs {
		if ch.Get("finish_reason").Type == gjson.String {
			return false
		}
		empty := true
		ch.Get("delta").ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "role":
			default:
				empty = v.Type == gjson.Null || v.Type == gjson.String && v.Str == ""
			}
			return empty
		})
		if !empty {
			return false
		}
	}
	return true
}

func spliceStream(first []byte, fe, ce []reshape.Event) ([]byte, error) {
	fs, cs := readStream(fe), readStream(ce)
	if fs.stop < 0 || cs.stop < 0 {
		return nil, streaming.ErrIncompleteStream
	}
	if cs.failed {
		return nil, fmt.Errorf("%w: the continuation carries an error", streaming.ErrIncompleteStream)
	}
	out, _ := callfilter.HeldPrefix(first, fs.stop, newRules)
	ids := fs.ids // first's id, created, model
	usage := reshape.SumUsage(fs.usage, cs.usage)
	started := false
	for i := range ce {
		e := &ce[i]
		if !e.HasData {
			out = reshape.AppendCont(out, e)
			continue
		}
		if strings.TrimSpace(e.Data) == "[DONE]" {
			continue
		}
		js, _, err := e.JSON(streaming.APIChat)
		if err != nil {
			return nil, err
		}
		if !started && startChunk(js) {
			started = true
			continue
		}
		started = true
		set := ids
		if gjson.Get(js, "usage").IsObject() {
			set = append(set[:len(set):len(set)], jsonscan.Set{Key: "usage", Val: usage})
		}
		out = sse.AppendFrame(out, e.Name, jsonscan.SetMembers(nil, js, set...))
	}
	if cs.usage == "" && fs.usage != "" {
		chunk := jsonscan.SetMembers(nil, `{"object":"chat.completion.chunk","choices":[]}`, append(ids, jsonscan.Set{Key: "usage", Val: usage})...)
		out = sse.AppendFrame(out, "", chunk)
	}
	return sse.AppendFrame(out, "", []byte("[DONE]")), nil
}

func spliceJSONObjects(fs, cs string) []byte {
	contChoices := gjson.Get(cs, "choices").Array()
	var choices []string
	for _, fc := range gjson.Get(fs, "choices").Array() {
		var cc gjson.Result
		for _, c := range contChoices {
			if c.Get("index").Int() == fc.Get("index").Int() {
				cc = c
			}
		}
		if !cc.Exists() {
			choices = append(choices, fc.Raw)
			continue
		}
		fm, cm := fc.Get("message"), cc.Get("message")
		set := []jsonscan.Set{
			{Key: "content", Val: joinText(fm.Get("content"), cm.Get("content"))},
			{Key: "refusal", Val: joinText(fm.Get("refusal"), cm.Get("refusal"))},
			{Key: "reasoning_content", Val: joinText(fm.Get("reasoning_content"), cm.Get("reasoning_content"))},
			{Key: "tool_calls", Val: cm.Get("tool_calls").Raw},
			{Key: "function_call", Val: cm.Get("function_call").Raw},
		}
		msg := fm.Raw
		if !fm.IsObject() {
			msg = `{"role":"assistant"}`
		}
		choice := jsonscan.SetMembers(nil, fc.Raw, jsonscan.Set{Key: "message", Val: string(jsonscan.SetMembers(nil, msg, set...))},
			jsonscan.Set{Key: "finish_reason", Val: cc.Get("finish_reason").Raw})
		choices = append(choices, string(choice))
	}
	set := []jsonscan.Set{{Key: "choices", Val: "[" + strings.Join(choices, ",") + "]"}}
	if u := reshape.SumUsage(gjson.Get(fs, "usage").Raw, gjson.Get(cs, "usage").Raw); jsonscan.IsObject(u) {
		set = append(set, jsonscan.Set{Key: "usage", Val: u})
	}
	return jsonscan.SetMembers(nil, fs, set...)
}

// joinText joins two message texts: null when both are absent or null.
func joinText(a, b gjson.Result) string {
	if a.Type != gjson.String && b.Type != gjson.String {
		if b.Exists() {
			return b.Raw
		}
		return a.Raw
	}
	return jsonscan.Quote(a.Str + b.Str)
}
