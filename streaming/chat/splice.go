package chat

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callfilter"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/reshape"
	"gatekeeper/streaming/sse"
)

// stopAt is the position of the first chunk carrying a finish_reason.
func stopAt(evs []reshape.Event) int {
	for i := range evs {
		js, ok, _ := evs[i].JSON(streaming.APIChat)
		if !ok {
			continue
		}
		for _, ch := range gjson.Get(js, "choices").Array() {
			if ch.Get("finish_reason").Type == gjson.String {
				return i
			}
		}
	}
	return -1
}

// streamUsage is the last usage object of a Chat stream, "" when none.
func streamUsage(evs []reshape.Event) string {
	usage := ""
	for i := range evs {
		if js, ok, _ := evs[i].JSON(streaming.APIChat); ok {
			if u := gjson.Get(js, "usage"); u.IsObject() {
				usage = u.Raw
			}
		}
	}
	return usage
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
	stop := stopAt(fe)
	if stop < 0 || stopAt(ce) < 0 {
		return nil, streaming.ErrIncompleteStream
	}
	for i := range ce {
		if js, ok, err := ce[i].JSON(streaming.APIChat); err == nil && ok && gjson.Get(js, "error").Exists() {
			return nil, fmt.Errorf("%w: the continuation carries an error", streaming.ErrIncompleteStream)
		}
	}
	out, _ := callfilter.HeldPrefix(first, stop, newRules)
	var ids []jsonscan.Set // first's id, created, model
	for i := 0; i < len(fe) && len(ids) == 0; i++ {
		if js, ok, _ := fe[i].JSON(streaming.APIChat); ok && gjson.Get(js, "id").Str != "" {
			ids = jsonscan.Members(ids, js, "id", "created", "model")
		}
	}
	firstUsage, contUsage := streamUsage(fe), streamUsage(ce)
	usage := reshape.SumUsage(firstUsage, contUsage)
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
	if contUsage == "" && firstUsage != "" {
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
