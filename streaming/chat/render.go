package chat

import (
	"strconv"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/reshape"
	"gatekeeper/streaming/sse"
)

// RenderSSE returns a stream that carries the same reply as the
// non-streamed body (what the SDKs accumulate back into an equal
// completion): per choice a role chunk, content, refusal and reasoning
// chunks, per call a chunk naming it and one with its arguments, a finish
// chunk; a usage chunk when the body has usage; data: [DONE]. A body that
// is not a chat completion fails with an error wrapping
// streaming.ErrInvalidJSON.
func (d Dialect) RenderSSE(body []byte) ([]byte, error) {
	return reshape.Render(d, body, "a chat completion", isReply, render)
}

// isReply reports whether r, a JSON object, is a reply RenderSSE renders.
func isReply(r gjson.Result) bool { return r.Get("choices").IsArray() }

func render(_ string, r gjson.Result) []byte {
	head := jsonscan.Members(nil, r.Raw, "id", "created", "model", "service_tier", "system_fingerprint")
	var out []byte
	chunk := func(choices string, extra ...jsonscan.Set) {
		b := []byte(`{"object":"chat.completion.chunk"`)
		for _, m := range append(head[:len(head):len(head)], extra...) {
			b = jsonscan.AppendQuoted(append(b, ','), m.Key)
			b = append(append(b, ':'), m.Val...)
		}
		b = append(append(append(b, `,"choices":`...), choices...), '}')
		out = sse.AppendFrame(out, "", b)
	}
	for _, ch := range r.Get("choices").Array() {
		idx := ch.Get("index").Raw
		if idx == "" {
			idx = "0"
		}
		delta := func(d, finish string) {
			chunk(`[{"index":` + idx + `,"delta":` + d + `,"logprobs":null,"finish_reason":` + finish + `}]`)
		}
		msg := ch.Get("message")
		role := msg.Get("role").Raw
		if role == "" {
			role = `"assistant"`
		}
		first := `{"role":` + role
		if c := msg.Get("content"); c.Type != gjson.String {
			first += `,"content":null`
		}
		delta(first+`}`, "null")
		for _, k := range []string{"reasoning_content", "content", "refusal"} {
			if v := msg.Get(k); v.Type == gjson.String {
				delta(`{`+jsonscan.Quote(k)+`:`+v.Raw+`}`, "null")
			}
		}
		for j, tc := range msg.Get("tool_calls").Array() {
			typ := tc.Get("type").Str
			inner, argKey := "function", "arguments"
			if typ == "custom" {
				inner, argKey = "custom", "input"
			}
			if typ == "" {
				typ = "function"
			}
			fn := tc.Get(inner)
			name := fn.Get("name").Raw
			if name == "" {
				name = `""`
			}
			el := `{"index":` + strconv.Itoa(j) + `,"id":` + jsonscan.Quote(tc.Get("id").Str) + `,"type":` + jsonscan.Quote(typ) +
				`,"` + inner + `":{"name":` + name + `,"` + argKey + `":""}}`
			delta(`{"tool_calls":[`+el+`]}`, "null")
			if a := fn.Get(argKey).Str; a != "" {
				delta(`{"tool_calls":[{"index":`+strconv.Itoa(j)+`,"`+inner+`":{"`+argKey+`":`+jsonscan.Quote(a)+`}}]}`, "null")
			}
		}
		if fc := msg.Get("function_call"); fc.IsObject() {
			delta(`{"function_call":{"name":`+jsonscan.Quote(fc.Get("name").Str)+`,"arguments":""}}`, "null")
			if a := fc.Get("arguments").Str; a != "" {
				delta(`{"function_call":{"arguments":`+jsonscan.Quote(a)+`}}`, "null")
			}
		}
		finish := ch.Get("finish_reason").Raw
		if finish == "" {
			finish = "null"
		}
		delta(`{}`, finish)
	}
	if u := r.Get("usage"); u.IsObject() {
		chunk(`[]`, jsonscan.Set{Key: "usage", Val: u.Raw})
	}
	return sse.AppendFrame(out, "", []byte("[DONE]"))
}
